package shm

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// Fault is the error of a guarded access that touched memory with nothing
// behind it: a page of a mapping whose object its owner truncated (SIGBUS),
// or an address no longer mapped (SIGSEGV). Addr is the faulting address,
// which tells whose mapping it was (Mapping.Contains).
type Fault struct {
	Addr uintptr
}

func (f *Fault) Error() string {
	return fmt.Sprintf("shared memory fault at address %#x: the region's object was truncated or removed while in use", f.Addr)
}

// AsFault returns the Fault err carries, if any.
func AsFault(err error) (*Fault, bool) {
	if err == nil {
		return nil, false // the common case, without errors.As's allocation
	}
	var f *Fault
	ok := errors.As(err, &f)
	return f, ok
}

// Guard runs fn on the calling goroutine so that a memory fault inside it
// returns a *Fault instead of killing the process: every read or write of a
// client's mapping (which the client can truncate at any moment) goes
// through Guard. Other panics go on unwinding.
//
// The protection is the Go runtime's (debug.SetPanicOnFault) and holds only
// for Go code running on this goroutine: goroutines fn starts are not
// covered, and neither is C code (see the package documentation).
func Guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if v := recover(); v != nil {
			f, ok := faultOf(v)
			if !ok {
				panic(v)
			}
			err = f
		}
	}()
	return fn()
}

// faultOf recognises the runtime's panic for a fault at an address
// (SetPanicOnFault makes it carry Addr); a nil dereference and any other
// panic are not faults.
func faultOf(v any) (*Fault, bool) {
	re, ok := v.(interface {
		error
		RuntimeError()
		Addr() uintptr
	})
	if !ok {
		return nil, false
	}
	return &Fault{Addr: re.Addr()}, true
}
