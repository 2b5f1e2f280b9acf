package shm

import "sync/atomic"

// A Watcher is told of every mapping Map makes and Close undoes. The
// executor sets one when it runs C backends: a signal handler of its own
// then absorbs a fault in a watched mapping (whoever touched it, Go or C)
// by putting zero pages over the mapping, and reports the mapping
// poisoned, so that C code can be given pointers into client memory.
type Watcher interface {
	// Watch starts watching the mapping data; nil when it cannot.
	Watch(data []byte) Watch
}

// A Watch is one watched mapping.
type Watch interface {
	// Protected reports whether a fault in the mapping is absorbed now
	// (the handler is installed).
	Protected() bool
	// Poisoned reports whether a fault in the mapping was absorbed.
	Poisoned() bool
	// Unwatch ends the watch; it is called before the mapping goes.
	Unwatch()
}

var watcher atomic.Pointer[Watcher]

// SetWatcher makes w watch the mappings made from now on (nil: none).
func SetWatcher(w Watcher) {
	if w == nil {
		watcher.Store(nil)
		return
	}
	watcher.Store(&w)
}

func watch(data []byte) Watch {
	w := watcher.Load()
	if w == nil || len(data) == 0 {
		return nil
	}
	return (*w).Watch(data)
}

// Protected reports whether a fault in the mapping is absorbed by the
// Watcher's handler: then code that Guard cannot cover (C) may be given
// pointers into Data, and learns nothing worse than zeros if the client
// truncates the object; the mapping reads poisoned afterwards.
func (m *Mapping) Protected() bool { return m.w != nil && m.w.Protected() }
