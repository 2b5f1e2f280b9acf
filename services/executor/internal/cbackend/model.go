//go:build cgo

package cbackend

/*
#include <stdlib.h>
#include <string.h>
#include "abi.h"
*/
import "C"

import (
	"context"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func kindOf(code C.TRITONSERVER_Error_Code) tritonerr.Kind {
	if code < 0 || code > C.TRITONSERVER_ERROR_CANCELLED {
		return tritonerr.Unknown
	}
	return tritonerr.Kind(code)
}

// newError makes a TRITONSERVER_Error for the backend to own.
func newError(err error) *C.TRITONSERVER_Error {
	if err == nil {
		return nil
	}
	te := tritonerr.From(err)
	cs := C.CString(te.Msg)
	defer C.free(unsafe.Pointer(cs))
	return C.nereid_error(C.TRITONSERVER_Error_Code(te.Kind), cs)
}

// objects maps the handles stored in C structures to Go objects
// (handles.go).
var objects handleTable

func register(v any) uintptr { return objects.add(v) }

func unregister(h uintptr) { objects.remove(h) }

func lookup[T any](h C.uintptr_t) T {
	if isRequestHandle(uintptr(h)) {
		v, _ := any(requests.get(uintptr(h))).(T)
		return v
	}
	v, _ := objects.get(uintptr(h)).(T)
	return v
}

// NewModel is TRITONBACKEND_ModelInitialize.
func (b *cBackend) NewModel(ctx context.Context, info backend.ModelInfo) (backend.Model, error) {
	m := &cModel{b: b, info: info, cfg: info.Config}
	cm := (*C.TRITONBACKEND_Model)(C.calloc(1, C.sizeof_TRITONBACKEND_Model))
	cm.name = C.CString(info.Name)
	cm.version = C.uint64_t(info.Version)
	cm.location = C.CString(absPath(info.Dir)) // TRITONBACKEND_ModelRepository: absolute and clean, as the backend directory
	cm.backend = b.sb.c
	// Auto-complete is asked for when the configuration leaves the tensors
	// to the backend, as Triton's default (no --disable-auto-complete-config).
	cm.auto_complete = C.bool(len(info.Config.GetInput()) == 0 || len(info.Config.GetOutput()) == 0)
	m.server = (*C.TRITONSERVER_Server)(C.calloc(1, C.sizeof_TRITONSERVER_Server))
	cm.server = m.server
	m.c = cm
	m.h = register(m)
	cm.h = C.uintptr_t(m.h)
	m.server.h = cm.h
	m.initializing = true
	if f := b.sb.lib.fns.modelInit; f != nil {
		if err := takeError(C.nereid_call_model(f, cm)); err != nil {
			m.free()
			return nil, err
		}
	}
	m.mu.Lock()
	m.initializing = false
	m.dec = modelconfig.IsDecoupled(m.cfg)
	m.mu.Unlock()
	return m, nil
}

// Unguarded marks the model as running C code, which Go's fault guard for
// client-owned shared memory cannot cover: the executor gives it private
// copies of inputs in shared memory.
func (m *cModel) Unguarded() {}

// RunsNativeCode marks the model's executions as native code in the
// executor's process: a fault in them ends the process, not just the
// execution (the executor says so in its catalog).
func (m *cModel) RunsNativeCode() {}

// decoupled reports the model's transaction policy.
func (m *cModel) decoupled() bool { return m.dec }

// ReportsResponseStatistics implements backend.ResponseStatsOwner: as in
// Triton, a C backend's response_stats are what it reports
// (TRITONBACKEND_ModelInstanceReportResponseStatistics), nothing else.
func (m *cModel) ReportsResponseStatistics() bool { return true }

// cModel is one loaded model version of a C backend.
type cModel struct {
	b    *cBackend
	info backend.ModelInfo
	c    *C.TRITONBACKEND_Model
	h    uintptr

	server *C.TRITONSERVER_Server

	bls sync.WaitGroup // BLS calls in flight

	mu           sync.Mutex
	cfg          *inference.ModelConfig // changed by ModelSetConfig during initialization
	completed    bool
	initializing bool

	dec bool // decoupled, once initialized (the configuration is fixed then)
}

// CompletedConfig returns the configuration the backend set with
// TRITONBACKEND_ModelSetConfig, or nil when it set none.
func (m *cModel) CompletedConfig() *inference.ModelConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.completed {
		return nil
	}
	return m.cfg
}

func (m *cModel) config() *inference.ModelConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// setConfig is TRITONBACKEND_ModelSetConfig: the new configuration is
// checked like one read from config.pbtxt and becomes the model's.
func (m *cModel) setConfig(js []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.initializing {
		return tritonerr.InvalidArgf("TRITONBACKEND_ModelSetConfig can only be called from TRITONBACKEND_ModelInitialize")
	}
	cfg := &inference.ModelConfig{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, cfg); err != nil {
		return tritonerr.InvalidArgf("failed to parse the model configuration set by the backend of model '%s': %v", m.info.Name, err)
	}
	// Triton keeps what the backend may not change.
	cfg.Name = m.info.Name
	if cfg.Backend == "" {
		cfg.Backend = m.cfg.GetBackend()
	}
	modelconfig.Normalize(cfg)
	if err := modelconfig.Validate(cfg); err != nil {
		return err
	}
	m.cfg = cfg
	m.completed = true
	return nil
}

// Finalize is TRITONBACKEND_ModelFinalize.
func (m *cModel) Finalize() error {
	m.bls.Wait()
	var err error
	if f := m.b.sb.lib.fns.modelFini; f != nil {
		err = takeError(C.nereid_call_model(f, m.c))
	}
	m.free()
	return err
}

func (m *cModel) free() {
	unregister(m.h)
	C.free(unsafe.Pointer(m.c.name))
	C.free(unsafe.Pointer(m.c.location))
	C.free(unsafe.Pointer(m.server))
	C.free(unsafe.Pointer(m.c))
}

// configJSON is the model configuration as TRITONBACKEND_ModelConfig gives
// it: the JSON of the model configuration endpoint.
func (m *cModel) configJSON() []byte {
	b, _ := modelconfig.JSON(m.config())
	return b
}
