//go:build cgo

package cbackend

/*
#cgo CFLAGS: -I${SRCDIR}/include
#cgo LDFLAGS: -ldl -Wl,--export-dynamic
#include <stdlib.h>
#include <string.h>
#include "abi.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Available reports whether this build can load C backends.
const Available = true

// Config configures where backends are found and what they are told.
type Config struct {
	// Directory is Triton's --backend-directory; default DefaultDirectory.
	Directory string
	// Settings are the --backend-config values by backend, then setting.
	Settings map[string]map[string]string
	// ServerLibrary is the libtritonserver.so to open before the first
	// backend; empty searches next to the executable, then the loader's
	// path.
	ServerLibrary string
	// Logger receives the backends' TRITONSERVER_LogMessage calls.
	Logger *slog.Logger
	// Server serves BLS requests and model queries made by backends; nil
	// refuses them.
	Server Server
}

// DefaultDirectory is Triton's default backend directory.
const DefaultDirectory = "/opt/tritonserver/backends"

// Loader finds and opens backend libraries.
type Loader struct {
	cfg Config
}

// NewLoader makes a loader. The process-wide log destination of the
// backends' messages is the last loader's logger.
func NewLoader(cfg Config) *Loader {
	if cfg.Directory == "" {
		cfg.Directory = DefaultDirectory
	}
	// Every path a backend sees is built from this one (its
	// "backend-directory" setting, its artifacts, the library opened),
	// absolute and clean: a backend that compares its own location with
	// the directory (Triton's Python backend does) finds them agree
	// however the flag was written ("../backends/", "./x").
	cfg.Directory = absPath(cfg.Directory)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	setLogger(cfg.Logger)
	return &Loader{cfg: cfg}
}

// Found is a backend found on Triton's search path.
type Found struct {
	// Name is the backend's name, Library the shared library to open and
	// Location the directory given to the backend as its artifacts.
	Name, Library, Location string
	// Key identifies the backend within the process: backends are
	// initialized once per library.
	Key string
}

// Find looks for the backend of a model the way Triton does: the model's
// version directory, the model directory, then <directory>/<name>/, each
// for libtriton_<name>.so; then a Python-based backend
// (<directory>/<name>/model.py, run by <directory>/python/libtriton_python.so).
// It reports false when none is there (the caller falls back to a built-in
// backend of that name).
func (l *Loader) Find(name, modelDir string, version int64) (Found, bool) {
	if name == "" {
		return Found{}, false
	}
	lib := "libtriton_" + name + ".so"
	modelDir = absPath(modelDir)
	for _, d := range []string{filepath.Join(modelDir, fmt.Sprint(version)), modelDir} {
		p := filepath.Join(d, lib)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return Found{Name: name, Library: p, Location: d, Key: p}, true
		}
	}
	return l.FindInstalled(name)
}

// absPath is p absolute and clean (p itself if the working directory is
// unknown, cleaned).
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// FindInstalled is Find without the model's own directories: only the
// libraries installed in the backend directory (the search for a model
// whose files arrived in a load request).
func (l *Loader) FindInstalled(name string) (Found, bool) {
	if name == "" {
		return Found{}, false
	}
	d := filepath.Join(l.cfg.Directory, name)
	p := filepath.Join(d, "libtriton_"+name+".so")
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return Found{Name: name, Library: p, Location: d, Key: p}, true
	}
	if st, err := os.Stat(filepath.Join(l.cfg.Directory, name, "model.py")); err == nil && !st.IsDir() {
		py := filepath.Join(l.cfg.Directory, "python", "libtriton_python.so")
		if _, err := os.Stat(py); err == nil {
			loc := filepath.Join(l.cfg.Directory, name)
			return Found{Name: name, Library: py, Location: loc, Key: py + "#" + name}, true
		}
	}
	return Found{}, false
}

// Factory returns the backend.Factory that initializes a found backend.
func (l *Loader) Factory(f Found) backend.Factory {
	return func(ctx context.Context) (backend.Backend, error) { return l.open(f) }
}

// config is the JSON given by TRITONBACKEND_BackendConfig: Triton's
// {"cmdline": {...}} with the defaults Triton adds for every backend.
func (l *Loader) config(name string) []byte {
	cmd := map[string]string{
		"backend-directory":      l.cfg.Directory,
		"min-compute-capability": "6.000000",
		"default-max-batch-size": "4",
	}
	for _, scope := range []string{"", name} { // every backend's, then its own
		for k, v := range l.cfg.Settings[scope] {
			cmd[k] = v
		}
	}
	b, _ := json.Marshal(map[string]any{"cmdline": cmd})
	return b
}

var (
	stubOnce sync.Once
	stubErr  error
)

// openServerLibrary opens libtritonserver.so once per process, globally,
// so that the backends' DT_NEEDED entry finds it already loaded.
func openServerLibrary(path string) error {
	stubOnce.Do(func() {
		var cands []string
		if path != "" {
			cands = append(cands, path)
		} else {
			if exe, err := os.Executable(); err == nil {
				d := filepath.Dir(exe)
				cands = append(cands, filepath.Join(d, "libtritonserver.so"), filepath.Join(d, "..", "lib", "libtritonserver.so"))
			}
			cands = append(cands, "libtritonserver.so") // the loader's own search
		}
		var errs []string
		for _, c := range cands {
			if c != "libtritonserver.so" {
				if _, err := os.Stat(c); err != nil {
					continue
				}
			}
			cs := C.CString(c)
			var cerr *C.char
			h := C.nereid_dlopen(cs, 1, &cerr)
			C.free(unsafe.Pointer(cs))
			if h != nil {
				return
			}
			errs = append(errs, C.GoString(cerr))
			C.free(unsafe.Pointer(cerr))
		}
		stubErr = fmt.Errorf("libtritonserver.so not found (looked for %v): build it with make build or put it on the loader's path: %v", cands, errs)
	})
	return stubErr
}

// library is one opened backend library with its entry points.
type library struct {
	found  Found
	handle unsafe.Pointer
	fns    struct {
		initialize, finalize, modelInit, modelFini, instInit, instFini, execute, instReady, attr unsafe.Pointer
	}
}

var (
	libsMu sync.Mutex
	libs   = map[string]*sharedBackend{}
)

// sharedBackend is a library initialized once per process and shared by
// every executor of the process that uses it.
type sharedBackend struct {
	lib  *library
	c    *C.TRITONBACKEND_Backend
	refs int
	attr *C.TRITONBACKEND_BackendAttribute
}

func (l *Loader) open(f Found) (backend.Backend, error) {
	libsMu.Lock()
	defer libsMu.Unlock()
	if sb, ok := libs[f.Key]; ok {
		sb.refs++
		return &cBackend{sb: sb, loader: l}, nil
	}
	if err := openServerLibrary(l.cfg.ServerLibrary); err != nil {
		return nil, tritonerr.Unavailablef("unable to load backend '%s': %v", f.Name, err)
	}
	if err := installFaultGuard(); err != nil {
		return nil, tritonerr.Unavailablef("unable to load backend '%s': %v", f.Name, err)
	}
	cp := C.CString(f.Library)
	defer C.free(unsafe.Pointer(cp))
	var cerr *C.char
	h := C.nereid_dlopen(cp, 0, &cerr)
	if h == nil {
		msg := C.GoString(cerr)
		C.free(unsafe.Pointer(cerr))
		return nil, tritonerr.Unavailablef("unable to load shared library: %s", msg)
	}
	lib := &library{found: f, handle: h}
	sym := func(name string) unsafe.Pointer {
		cn := C.CString(name)
		defer C.free(unsafe.Pointer(cn))
		return C.nereid_dlsym(h, cn)
	}
	lib.fns.initialize = sym("TRITONBACKEND_Initialize")
	lib.fns.finalize = sym("TRITONBACKEND_Finalize")
	lib.fns.modelInit = sym("TRITONBACKEND_ModelInitialize")
	lib.fns.modelFini = sym("TRITONBACKEND_ModelFinalize")
	lib.fns.instInit = sym("TRITONBACKEND_ModelInstanceInitialize")
	lib.fns.instFini = sym("TRITONBACKEND_ModelInstanceFinalize")
	lib.fns.execute = sym("TRITONBACKEND_ModelInstanceExecute")
	lib.fns.instReady = sym("TRITONBACKEND_ModelInstanceReady")
	lib.fns.attr = sym("TRITONBACKEND_GetBackendAttribute")
	if lib.fns.execute == nil {
		C.nereid_dlclose(h)
		return nil, tritonerr.Unavailablef("unable to find required entrypoint 'TRITONBACKEND_ModelInstanceExecute' in backend library: %s", f.Library)
	}

	cb := (*C.TRITONBACKEND_Backend)(C.calloc(1, C.sizeof_TRITONBACKEND_Backend))
	cb.name = C.CString(f.Name)
	cb.location = C.CString(f.Location)
	cfg := l.config(f.Name)
	cb.config.json = (*C.char)(C.CBytes(append(cfg, 0)))
	cb.config.size = C.size_t(len(cfg))
	sb := &sharedBackend{lib: lib, c: cb, refs: 1}
	if lib.fns.initialize != nil {
		if e := C.nereid_call_backend(lib.fns.initialize, cb); e != nil {
			err := takeError(e)
			freeBackend(cb)
			C.nereid_dlclose(h)
			return nil, err
		}
	}
	if lib.fns.attr != nil {
		sb.attr = (*C.TRITONBACKEND_BackendAttribute)(C.calloc(1, C.sizeof_TRITONBACKEND_BackendAttribute))
		if e := C.nereid_call_attr(lib.fns.attr, cb, sb.attr); e != nil {
			// Triton ignores the attributes of a failing call.
			_ = takeError(e)
			C.memset(unsafe.Pointer(sb.attr), 0, C.sizeof_TRITONBACKEND_BackendAttribute)
		}
	}
	libs[f.Key] = sb
	return &cBackend{sb: sb, loader: l}, nil
}

func freeBackend(cb *C.TRITONBACKEND_Backend) {
	C.free(unsafe.Pointer(cb.name))
	C.free(unsafe.Pointer(cb.location))
	C.free(unsafe.Pointer(cb.config.json))
	C.free(unsafe.Pointer(cb))
}

// takeError turns a TRITONSERVER_Error returned to the server into a Go
// error and frees it (the server owns errors backends return).
func takeError(e *C.TRITONSERVER_Error) error {
	if e == nil {
		return nil
	}
	err := tritonerr.New(kindOf(e.code), "%s", C.GoString(e.msg))
	C.TRITONSERVER_ErrorDelete(e)
	return err
}

// cBackend is one executor's use of a shared backend.
type cBackend struct {
	sb     *sharedBackend
	loader *Loader
	once   sync.Once
}

// Finalize releases the executor's use; the last one runs
// TRITONBACKEND_Finalize. The library stays mapped: backends are not
// written to be unloaded and reloaded in one process.
func (b *cBackend) Finalize() (err error) {
	b.once.Do(func() {
		libsMu.Lock()
		defer libsMu.Unlock()
		b.sb.refs--
		if b.sb.refs > 0 {
			return
		}
		delete(libs, b.sb.lib.found.Key)
		if f := b.sb.lib.fns.finalize; f != nil {
			err = takeError(C.nereid_call_backend(f, b.sb.c))
		}
		if b.sb.attr != nil {
			C.free(unsafe.Pointer(b.sb.attr))
		}
		freeBackend(b.sb.c)
	})
	return err
}
