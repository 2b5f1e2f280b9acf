//go:build !cgo

package cbackend

import (
	"context"
	"log/slog"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/shm"
)

// Available reports whether this build can load C backends: a build
// without cgo cannot, and serves its built-in Go backends only.
const Available = false

// Config configures where backends are found (see the cgo build).
type Config struct {
	Directory     string
	Settings      map[string]map[string]string
	ServerLibrary string
	Logger        *slog.Logger
	Server        Server
}

// DefaultDirectory is Triton's default backend directory.
const DefaultDirectory = "/opt/tritonserver/backends"

// Server is what backends reach through TRITONSERVER_Server.
type Server interface {
	Infer(ctx context.Context, req *inference.ModelInferRequest, emit func(resp *inference.ModelInferResponse, err error, final bool) error) error
	ModelReady(ctx context.Context, name string, version int64) (bool, error)
	ModelDecoupled(ctx context.Context, name string, version int64) (bool, error)
	LoadModel(ctx context.Context, name, config string, files map[string][]byte) error
	UnloadModel(ctx context.Context, name string, dependents bool) error
}

// Loader finds nothing without cgo.
type Loader struct{}

// NewLoader makes a loader.
func NewLoader(Config) *Loader { return &Loader{} }

// Found is a backend found on Triton's search path.
type Found struct{ Name, Library, Location, Key string }

// Find reports false: C backends need cgo.
func (l *Loader) Find(name, modelDir string, version int64) (Found, bool) { return Found{}, false }

// FindInstalled reports false: C backends need cgo.
func (l *Loader) FindInstalled(name string) (Found, bool) { return Found{}, false }

// Factory is never called without cgo.
func (l *Loader) Factory(Found) backend.Factory { return nil }

// ShmWatcher is nil without cgo: no C code runs, Go's guard suffices.
func ShmWatcher() shm.Watcher { return nil }

// AbsorbedFaults is 0 without cgo.
func AbsorbedFaults() uint64 { return 0 }
