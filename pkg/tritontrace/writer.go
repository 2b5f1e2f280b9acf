package tritontrace

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nereid-io/nereid/pkg/tracesetting"
)

// Writer samples requests with a gateway's trace settings and writes the
// traces to one trace file (Triton's TraceManager with its TraceFile).
type Writer struct {
	settings *tracesetting.Manager
	file     *file
	log      *slog.Logger
	nextID   atomic.Uint64

	mu      sync.Mutex
	streams map[*tracesetting.Sampler]*stream
	closed  bool
}

// stream is what one setting gathered (Triton's TraceSetting's
// trace_stream_ and counters).
type stream struct {
	buf      []byte // finished traces, comma-separated
	inStream uint32 // traces in buf
	// created and collected count the traces started under the setting
	// and those finished.
	created, collected uint64
}

// New returns a Writer of path that samples with settings; log takes
// write failures (Triton logs them and goes on).
func New(settings *tracesetting.Manager, path string, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	return &Writer{settings: settings, file: &file{path: path}, log: log, streams: map[*tracesetting.Sampler]*stream{}}
}

// Start decides whether a request for model is traced and returns its
// trace, numbered from 1; nil when it is not. version is the version the
// request was resolved to, requestID the request's id.
func (w *Writer) Start(model string, version int64, requestID string) *Trace {
	s := w.settings.Sampler(model)
	if !s.Sample() {
		return nil
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	st := w.streams[s]
	if st == nil {
		st = &stream{}
		w.streams[s] = st
	}
	st.created++
	w.mu.Unlock()
	return &Trace{ID: w.nextID.Add(1), Model: model, Version: version, RequestID: requestID, level: s.Values().Level, sampler: s}
}

// StartChild returns the trace of a request that parent's request spawned
// (an ensemble's step), as Triton's SpawnChildTrace: numbered like any
// trace, naming parent as its parent_id, at parent's level; it is not a
// sample of its own, and its records are written with parent's root
// trace once both have ended (Finish). parent must have been prepared
// (Trace.Spawns). nil when parent is.
func (w *Writer) StartChild(parent *Trace, model string, version int64, requestID string) *Trace {
	if parent == nil {
		return nil
	}
	return &Trace{ID: w.nextID.Add(1), Model: model, Version: version, RequestID: requestID, ParentID: parent.ID,
		level: parent.level, family: parent.family}
}

// save is one write the Writer decided on, made outside its lock.
type save struct {
	data    []byte
	indexed bool
}

// Finish adds t, ended, to what its setting gathered, and writes as
// Triton's TraceSetting::WriteTrace does: every log_frequency traces to
// the next indexed file, and all of them to one as soon as trace_count has
// run out and the last trace counted ended. Settings that a change
// replaced write what they gathered once their traces have all ended.
func (w *Writer) Finish(t *Trace) {
	if t == nil {
		return
	}
	if t.ParentID != 0 { // a child: written with its root
		t.family.adopt(t)
		return
	}
	var saves []save
	w.mu.Lock()
	st := w.streams[t.sampler]
	if st == nil || w.closed {
		w.mu.Unlock()
		return
	}
	if st.inStream > 0 {
		st.buf = append(st.buf, ',')
	}
	st.buf = t.family.appendChildren(t.appendJSON(st.buf))
	st.inStream++
	st.collected++
	v := t.sampler.Values()
	if (v.Count >= 0 && t.sampler.Remaining() == 0 && st.collected == st.created) ||
		(v.LogFrequency != 0 && st.inStream >= v.LogFrequency) {
		saves = append(saves, save{data: st.buf, indexed: true})
		st.buf, st.inStream = nil, 0
	}
	saves = w.retireLocked(saves, false)
	w.mu.Unlock()
	w.write(saves)
}

// retireLocked takes what replaced settings (all settings at close)
// gathered and forgets them: Triton's ~TraceSetting.
func (w *Writer) retireLocked(saves []save, all bool) []save {
	for s, st := range w.streams {
		if !all && (st.created != st.collected || w.settings.Active(s)) {
			continue
		}
		if st.inStream > 0 {
			saves = append(saves, save{data: st.buf, indexed: s.Values().LogFrequency != 0})
		}
		delete(w.streams, s)
	}
	return saves
}

func (w *Writer) write(saves []save) {
	for _, s := range saves {
		if err := w.file.save(s.data, s.indexed); err != nil {
			w.log.Error("failed creating trace file: "+err.Error(), "file", w.file.path)
		}
	}
}

// Close writes what every setting gathered and closes the trace file
// (Triton does both at shutdown). Traces that end after it are dropped.
func (w *Writer) Close() error {
	w.mu.Lock()
	w.closed = true
	saves := w.retireLocked(nil, true)
	w.mu.Unlock()
	w.write(saves)
	return w.file.close()
}

// file is Triton's TraceFile: the trace file, opened at its first write
// with '[' and closed with ']', and the index of its numbered siblings.
type file struct {
	path  string
	index atomic.Uint64

	mu    sync.Mutex
	f     *os.File
	wrote bool
}

func (f *file) save(data []byte, indexed bool) error {
	if indexed {
		name := f.path + "." + strconv.FormatUint(f.index.Add(1)-1, 10)
		out := make([]byte, 0, len(data)+2)
		out = append(append(append(out, '['), data...), ']')
		return os.WriteFile(name, out, 0o644)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sep := byte(',')
	if !f.wrote {
		out, err := os.Create(f.path)
		if err != nil {
			return err
		}
		f.f, f.wrote, sep = out, true, '['
	}
	if f.f == nil {
		return fmt.Errorf("%s is closed", f.path)
	}
	buf := make([]byte, 0, len(data)+1)
	_, err := f.f.Write(append(append(buf, sep), data...))
	return err
}

func (f *file) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f == nil {
		return nil
	}
	_, err := f.f.Write([]byte{']'})
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	f.f = nil
	return err
}
