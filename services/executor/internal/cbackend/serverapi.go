//go:build cgo

package cbackend

/*
#define NEREID_TYPES_ONLY
#include <stdlib.h>
#include "abi.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"time"
	"unsafe"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ServerQueries is what a Server answers of Triton's server queries
// (TRITONSERVER_ServerMetadata, ...ModelMetadata, ...ModelConfig,
// ...ModelStatistics, ...ModelIndex, ...ModelBatchProperties,
// ...Metrics): the constellation as a client sees it. A Server without
// them answers those functions with TRITONSERVER_ERROR_UNSUPPORTED.
// A version of -1 is the one the server's policy picks.
type ServerQueries interface {
	ServerMetadata(ctx context.Context) (*inference.ServerMetadataResponse, error)
	ModelMetadata(ctx context.Context, name string, version int64) (*inference.ModelMetadataResponse, error)
	ModelConfig(ctx context.Context, name string, version int64) (*inference.ModelConfig, error)
	ModelStatistics(ctx context.Context, name string, version int64) (*inference.ModelStatisticsResponse, error)
	ModelIndex(ctx context.Context, readyOnly bool) (*inference.RepositoryIndexResponse, error)
	// Metrics is the Prometheus text of the process's metrics port.
	Metrics() []byte
}

// queryTimeout bounds one server query of a backend.
const queryTimeout = 30 * time.Second

func queriesOf(s *C.TRITONSERVER_Server, fn string) (ServerQueries, *C.TRITONSERVER_Error) {
	_, srv, e := serverOf(s)
	if e != nil {
		return nil, e
	}
	q, ok := srv.(ServerQueries)
	if !ok {
		return nil, newError(tritonerr.Unsupportedf("%s is not supported: this executor answers no server queries", fn))
	}
	return q, nil
}

// newMessage stores body in *out as a TRITONSERVER_Message the backend
// deletes.
func newMessage(out **C.TRITONSERVER_Message, body []byte) *C.TRITONSERVER_Error {
	if out == nil {
		return newError(tritonerr.InvalidArgf("message must not be null"))
	}
	var p *C.char
	if len(body) > 0 {
		p = (*C.char)(unsafe.Pointer(&body[0]))
	}
	setOut(out, C.nereid_message_new(p, C.size_t(len(body))))
	return nil
}

func queryContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), queryTimeout)
}

// Triton's JSON of server metadata (TRITONSERVER_ServerMetadata), the body
// of GET /v2.
type serverMetadataJSON struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

//export TRITONSERVER_ServerMetadata
func TRITONSERVER_ServerMetadata(s *C.TRITONSERVER_Server, out **C.TRITONSERVER_Message) *C.TRITONSERVER_Error {
	q, e := queriesOf(s, "TRITONSERVER_ServerMetadata")
	if e != nil {
		return e
	}
	ctx, cancel := queryContext()
	defer cancel()
	md, err := q.ServerMetadata(ctx)
	if err != nil {
		return newError(err)
	}
	body, _ := json.Marshal(serverMetadataJSON{Name: md.GetName(), Version: md.GetVersion(), Extensions: nonNil(md.GetExtensions())})
	return newMessage(out, body)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

type tensorMetadataJSON struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// Triton's JSON of model metadata (TRITONSERVER_ServerModelMetadata).
type modelMetadataJSON struct {
	Name     string               `json:"name"`
	Versions []string             `json:"versions"`
	Platform string               `json:"platform"`
	Inputs   []tensorMetadataJSON `json:"inputs"`
	Outputs  []tensorMetadataJSON `json:"outputs"`
}

func tensorsJSON(ts []*inference.ModelMetadataResponse_TensorMetadata) []tensorMetadataJSON {
	out := make([]tensorMetadataJSON, 0, len(ts))
	for _, t := range ts {
		out = append(out, tensorMetadataJSON{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: nonNil(t.GetShape())})
	}
	return out
}

//export TRITONSERVER_ServerModelMetadata
func TRITONSERVER_ServerModelMetadata(s *C.TRITONSERVER_Server, name *C.char, version C.int64_t, out **C.TRITONSERVER_Message) *C.TRITONSERVER_Error {
	q, e := queriesOf(s, "TRITONSERVER_ServerModelMetadata")
	if e != nil {
		return e
	}
	if name == nil {
		return newError(tritonerr.InvalidArgf("model name must not be null"))
	}
	ctx, cancel := queryContext()
	defer cancel()
	md, err := q.ModelMetadata(ctx, C.GoString(name), int64(version))
	if err != nil {
		return newError(err)
	}
	body, _ := json.Marshal(modelMetadataJSON{Name: md.GetName(), Versions: nonNil(md.GetVersions()), Platform: md.GetPlatform(),
		Inputs: tensorsJSON(md.GetInputs()), Outputs: tensorsJSON(md.GetOutputs())})
	return newMessage(out, body)
}

// modelConfig asks for a model's configuration.
func modelConfig(q ServerQueries, name string, version int64) (*inference.ModelConfig, error) {
	ctx, cancel := queryContext()
	defer cancel()
	cfg, err := q.ModelConfig(ctx, name, version)
	if err == nil && cfg == nil {
		err = tritonerr.Internalf("no configuration known for model '%s'", name)
	}
	return cfg, err
}

//export TRITONSERVER_ServerModelConfig
func TRITONSERVER_ServerModelConfig(s *C.TRITONSERVER_Server, name *C.char, version C.int64_t, configVersion C.uint32_t, out **C.TRITONSERVER_Message) *C.TRITONSERVER_Error {
	q, e := queriesOf(s, "TRITONSERVER_ServerModelConfig")
	if e != nil {
		return e
	}
	if name == nil {
		return newError(tritonerr.InvalidArgf("model name must not be null"))
	}
	cfg, err := modelConfig(q, C.GoString(name), int64(version))
	if err != nil {
		return newError(err)
	}
	// Triton's ModelConfigToJson knows one JSON form, version 1.
	if configVersion != 1 {
		return newError(tritonerr.InvalidArgf("model configuration version %d not supported, supported versions are: 1", uint32(configVersion)))
	}
	body, err := modelconfig.JSON(cfg)
	if err != nil {
		return newError(tritonerr.Internalf("rendering model configuration: %v", err))
	}
	return newMessage(out, body)
}

//export TRITONSERVER_ServerModelStatistics
func TRITONSERVER_ServerModelStatistics(s *C.TRITONSERVER_Server, name *C.char, version C.int64_t, out **C.TRITONSERVER_Message) *C.TRITONSERVER_Error {
	q, e := queriesOf(s, "TRITONSERVER_ServerModelStatistics")
	if e != nil {
		return e
	}
	n := ""
	if name != nil {
		n = C.GoString(name)
	}
	ctx, cancel := queryContext()
	defer cancel()
	st, err := q.ModelStatistics(ctx, n, int64(version))
	if err != nil {
		return newError(err)
	}
	// Triton's JSON of statistics is its protobuf's with the proto
	// field names, every field printed and 64-bit integers as numbers:
	// modelconfig's rules.
	if st.ModelStats == nil {
		st.ModelStats = []*inference.ModelStatistics{}
	}
	return newMessage(out, modelconfig.AppendJSON(nil, st.ProtoReflect()))
}

// Triton's JSON of one entry of the repository index: the version and
// reason only when known.
type modelIndexJSON struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

//export TRITONSERVER_ServerModelIndex
func TRITONSERVER_ServerModelIndex(s *C.TRITONSERVER_Server, flags C.uint32_t, out **C.TRITONSERVER_Message) *C.TRITONSERVER_Error {
	q, e := queriesOf(s, "TRITONSERVER_ServerModelIndex")
	if e != nil {
		return e
	}
	ctx, cancel := queryContext()
	defer cancel()
	idx, err := q.ModelIndex(ctx, flags&C.TRITONSERVER_INDEX_FLAG_READY != 0)
	if err != nil {
		return newError(err)
	}
	entries := make([]modelIndexJSON, 0, len(idx.GetModels()))
	for _, m := range idx.GetModels() {
		entries = append(entries, modelIndexJSON{Name: m.GetName(), Version: m.GetVersion(), State: m.GetState(), Reason: m.GetReason()})
	}
	body, _ := json.Marshal(entries)
	return newMessage(out, body)
}

// BatchProperties: Triton answers TRITONSERVER_BATCH_FIRST_DIM for a model
// whose max_batch_size is above 0, TRITONSERVER_BATCH_UNKNOWN otherwise,
// and sets *voidp to null.
//
//export TRITONSERVER_ServerModelBatchProperties
func TRITONSERVER_ServerModelBatchProperties(s *C.TRITONSERVER_Server, name *C.char, version C.int64_t, flags *C.uint32_t, voidp *unsafe.Pointer) *C.TRITONSERVER_Error {
	if voidp != nil {
		setOutPointer(voidp, nil)
	}
	q, e := queriesOf(s, "TRITONSERVER_ServerModelBatchProperties")
	if e != nil {
		return e
	}
	if name == nil || flags == nil {
		return newError(tritonerr.InvalidArgf("model name and flags must not be null"))
	}
	cfg, err := modelConfig(q, C.GoString(name), int64(version))
	if err != nil {
		return newError(err)
	}
	*flags = C.TRITONSERVER_BATCH_UNKNOWN
	if cfg.GetMaxBatchSize() > 0 {
		*flags = C.TRITONSERVER_BATCH_FIRST_DIM
	}
	return nil
}

//export TRITONSERVER_ServerMetrics
func TRITONSERVER_ServerMetrics(s *C.TRITONSERVER_Server, out **C.TRITONSERVER_Metrics) *C.TRITONSERVER_Error {
	q, e := queriesOf(s, "TRITONSERVER_ServerMetrics")
	if e != nil {
		return e
	}
	if out == nil {
		return newError(tritonerr.InvalidArgf("metrics must not be null"))
	}
	text := q.Metrics()
	var p *C.char
	if len(text) > 0 {
		p = (*C.char)(unsafe.Pointer(&text[0]))
	}
	m := C.nereid_metrics_new(p, C.size_t(len(text)))
	if m == nil {
		return newError(tritonerr.Internalf("out of memory for metrics"))
	}
	setOutPointer((*unsafe.Pointer)(unsafe.Pointer(out)), unsafe.Pointer(m))
	return nil
}
