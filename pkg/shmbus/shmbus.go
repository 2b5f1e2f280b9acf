// Package shmbus is the shm-registry's side of the bus for its peers: the
// typed client gateways and executors use to register, list, hold and
// release clients' shared-memory regions, and the one a gateway uses to
// have the executor owning a GPU check a CUDA region before it is
// registered. Subjects come from pkg/bus; callers never build them. The
// registry's own rules are services/shm-registry's.
package shmbus

import (
	"context"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ErrNoRegistry answers a call that no shm-registry took.
var ErrNoRegistry = tritonerr.Unavailablef("shared memory is unavailable: no shm-registry is running")

// Registry talks to the shm-registry.
type Registry struct{ c *bus.Conn }

// NewRegistry returns the client over c.
func NewRegistry(c *bus.Conn) *Registry { return &Registry{c: c} }

func (r *Registry) call(ctx context.Context, subject string, req, resp proto.Message) error {
	err := r.c.Request(ctx, subject, req, resp)
	if noResponders(err) {
		return ErrNoRegistry
	}
	return err
}

// noResponders reports a bus error that says nobody listens on the
// subject, whichever peer it names.
func noResponders(err error) bool {
	if err == nil {
		return false
	}
	te := tritonerr.From(err)
	return te.Kind == tritonerr.Unavailable && strings.Contains(te.Msg, "no responders")
}

// Status lists the registered regions of kind (name "": all of them; kind
// unset: every kind), with Triton's NOT_FOUND for a name not registered.
func (r *Registry) Status(ctx context.Context, kind busv1.ShmKind, name string) ([]*busv1.ShmRegion, error) {
	var resp busv1.ShmStatusResponse
	if err := r.call(ctx, bus.ShmStatusSubject, &busv1.ShmStatusRequest{Kind: kind, Name: name}, &resp); err != nil {
		return nil, err
	}
	return resp.GetRegions(), nil
}

// Register registers region.
func (r *Registry) Register(ctx context.Context, region *busv1.ShmRegion) error {
	return r.call(ctx, bus.ShmRegisterSubject, &busv1.ShmRegisterRequest{Region: region}, &busv1.ShmRegisterResponse{})
}

// Unregister unregisters the region of kind named name ("": every one of
// that kind).
func (r *Registry) Unregister(ctx context.Context, kind busv1.ShmKind, name string) error {
	return r.call(ctx, bus.ShmUnregisterSubject, &busv1.ShmUnregisterRequest{Kind: kind, Name: name}, &busv1.ShmUnregisterResponse{})
}

// Acquire holds the regions named for holder until Release or expires,
// and returns them as registered: a region held is not unregistered under
// a request that uses it.
func (r *Registry) Acquire(ctx context.Context, holder string, names []string, expires time.Time) ([]*busv1.ShmRegion, error) {
	var resp busv1.ShmAcquireResponse
	if err := r.call(ctx, bus.ShmAcquireSubject, &busv1.ShmAcquireRequest{Holder: holder, Names: names, ExpiresUnixMs: expires.UnixMilli()}, &resp); err != nil {
		return nil, err
	}
	return resp.GetRegions(), nil
}

// Release ends holder's holds of the regions named.
func (r *Registry) Release(ctx context.Context, holder string, names []string) error {
	return r.call(ctx, bus.ShmReleaseSubject, &busv1.ShmReleaseRequest{Holder: holder, Names: names}, &busv1.ShmReleaseResponse{})
}

// Devices talks to the executors that own GPUs.
type Devices struct{ c *bus.Conn }

// NewDevices returns the client over c.
func NewDevices(c *bus.Conn) *Devices { return &Devices{c: c} }

// ErrNoDevice answers a check that no executor took: none owns that GPU of
// that node.
var ErrNoDevice = tritonerr.Unavailablef("no executor owns the GPU")

// CheckCuda has the executor owning GPU device of node open region's
// handle and check its size; ErrNoDevice when none owns it.
func (d *Devices) CheckCuda(ctx context.Context, node string, device int64, region *busv1.ShmRegion) error {
	err := d.c.Request(ctx, bus.ShmCudaSubject(node, device), &busv1.ShmCudaCheckRequest{Region: region}, &busv1.ShmCudaCheckResponse{})
	if noResponders(err) {
		return ErrNoDevice
	}
	return err
}
