package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/shmbus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Triton's shared memory extension. The gateway owns the protocol side:
// the HTTP and gRPC endpoints (shmhttp.go, shmgrpc.go), validation of
// what a client registers, and the checks and routing of inference
// requests whose tensors live in shared memory. Regions themselves are
// kept by the shm-registry (services/shm-registry); the gateway asks it
// for every operation and keeps nothing. Register is validated here
// because a client registers through the gateway of its own node, whose
// /dev/shm is the one its key names (CUDA handles are checked by the
// executor that owns the device). Both go through their typed clients,
// pkg/shmbus.

const (
	// shmCallTimeout bounds a registry call.
	shmCallTimeout = 10 * time.Second
	// shmHoldMargin is how long a hold outlives its request's deadline: the
	// registry drops a hold whose gateway vanished once it lapses.
	shmHoldMargin = 30 * time.Second
)

var errShmDisabled = tritonerr.Unsupportedf("Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.")

func kindWords(k busv1.ShmKind) string {
	if k == busv1.ShmKind_SHM_KIND_CUDA {
		return "cuda"
	}
	return "system"
}

// registry is the shm-registry's client, and shmCtx bounds one call to
// it.
func (g *Gateway) registry() *shmbus.Registry { return shmbus.NewRegistry(g.bus) }

func shmCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, shmCallTimeout)
}

// shmStatus lists the regions of kind (name "": all of them) with Triton's
// NOT_FOUND errors. It works whether or not client shm is allowed.
func (g *Gateway) shmStatus(ctx context.Context, kind busv1.ShmKind, name string) ([]*busv1.ShmRegion, error) {
	ctx, cancel := shmCtx(ctx)
	defer cancel()
	return g.registry().Status(ctx, kind, name)
}

func (g *Gateway) shmUnregister(ctx context.Context, kind busv1.ShmKind, name string) error {
	if !g.cfg.AllowClientShm {
		return errShmDisabled
	}
	ctx, cancel := shmCtx(ctx)
	defer cancel()
	return g.registry().Unregister(ctx, kind, name)
}

// shmRegister registers r with the registry.
func (g *Gateway) shmRegister(ctx context.Context, r *busv1.ShmRegion) error {
	ctx, cancel := shmCtx(ctx)
	defer cancel()
	return g.registry().Register(ctx, r)
}

// shmCheckFree fails with Triton's ALREADY_EXISTS when name is taken by a
// region of either kind. Triton checks this before it opens the memory;
// the registry checks again, atomically, when the region is added.
func (g *Gateway) shmCheckFree(ctx context.Context, name string) error {
	regions, err := g.shmStatus(ctx, busv1.ShmKind_SHM_KIND_UNSPECIFIED, name)
	if err != nil {
		return err
	}
	if len(regions) > 0 {
		return tritonerr.New(tritonerr.AlreadyExists, "shared memory region '%s' already in manager", name)
	}
	return nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errNoRegionName refuses a region without a name (gRPC; over HTTP the
// route needs one) once every check Triton makes has passed. Triton's
// manager would register it under the empty name; a cluster cannot, as
// the empty name means every region in unregister and status. The words
// are Triton's for a region its manager does not take.
var errNoRegionName = tritonerr.InvalidArgf("failed to register shared memory region '': invalid args")

// registerSystemShm validates and registers a system region in Triton's
// order: key, duplicate name, then the object itself (pkg/shm.Inspect).
// The caller has checked that client shm is allowed.
func (g *Gateway) registerSystemShm(ctx context.Context, name, key string, offset, byteSize uint64) error {
	if err := shm.ValidateKey(name, key); err != nil {
		return err
	}
	if name != "" { // no region has the empty name
		if err := g.shmCheckFree(ctx, name); err != nil {
			return err
		}
	}
	if err := shm.Inspect(name, key, offset, byteSize); err != nil {
		// The client sees INTERNAL; the operator sees why (most often the
		// server's user may not open the client's object).
		if tritonerr.From(err).Kind == tritonerr.Internal {
			g.log.Warn("shared memory region not registered", "region", name, "key", key, "err", err)
		}
		return err
	}
	if name == "" {
		return errNoRegionName
	}
	r := &busv1.ShmRegion{Name: name, Kind: busv1.ShmKind_SHM_KIND_SYSTEM, Node: g.cfg.Node, Id: newID(),
		Key: key, Offset: offset, ByteSize: byteSize}
	return g.shmRegister(ctx, r)
}

// cudaIpcHandleSize is sizeof(cudaIpcMemHandle_t).
const cudaIpcHandleSize = 64

// registerCudaShm registers a CUDA region after the executor that owns
// device on this node has opened the handle and checked byteSize. With no
// such executor (no GPU here) it fails as a Triton built without GPUs does;
// a handle that is not a cudaIpcMemHandle_t's 64 bytes (gRPC: HTTP has
// refused it) fails to open there with Triton's "invalid args".
func (g *Gateway) registerCudaShm(ctx context.Context, name string, handle []byte, device int64, byteSize uint64) error {
	if name != "" { // no region has the empty name
		if err := g.shmCheckFree(ctx, name); err != nil {
			return err
		}
	}
	r := &busv1.ShmRegion{Name: name, Kind: busv1.ShmKind_SHM_KIND_CUDA, Node: g.cfg.Node, Id: newID(),
		DeviceId: device, RawHandle: handle, ByteSize: byteSize}
	cctx, cancel := shmCtx(ctx)
	err := shmbus.NewDevices(g.bus).CheckCuda(cctx, g.cfg.Node, device, r)
	cancel()
	if errors.Is(err, shmbus.ErrNoDevice) {
		return tritonerr.InvalidArgf("failed to register CUDA shared memory region: '%s', GPUs not supported", name)
	}
	if err != nil {
		return err
	}
	if name == "" {
		return errNoRegionName
	}
	return g.shmRegister(ctx, r)
}

// checkGRPCShm applies the gRPC front end's rules to the shared_memory_*
// parameters of every tensor (ParseSharedMemoryParams) and to the outputs'
// classification parameter, before the contents are looked at, as Triton
// does.
func checkGRPCShm(req *inference.ModelInferRequest) error {
	for _, in := range req.GetInputs() {
		if _, _, err := shm.FromParams(in.GetName(), in.GetParameters(), true); err != nil {
			return err
		}
	}
	for _, out := range req.GetOutputs() {
		_, ok, err := shm.FromParams(out.GetName(), out.GetParameters(), true)
		if err != nil {
			return err
		}
		_, class, err := infer.ClassificationCount(out) // ParseClassificationParams
		if err != nil {
			return err
		}
		if ok && class {
			return tritonerr.InvalidArgf("output can't set both 'shared_memory_region' and 'classification'")
		}
	}
	return nil
}

type shmUse struct {
	tensor string
	ref    shm.Ref
}

// shmRoute prepares a request whose tensors use shared memory (shmHold)
// and picks the subject of the executors on the regions' node (the
// device's executor for CUDA). The returned release ends the holds; call
// it once the answer is back. A request without shared memory keeps
// subject.
func (g *Gateway) shmRoute(ctx context.Context, req *inference.ModelInferRequest, subject string) (string, func(), error) {
	first, cuda, release, err := g.shmHold(ctx, req)
	if err != nil || first == nil {
		return subject, release, err
	}
	model, version := req.GetModelName(), req.GetModelVersion()
	if cuda != nil {
		return bus.InferDeviceSubject(model, version, cuda.GetNode(), cuda.GetDeviceId()), release, nil
	}
	return bus.InferNodeSubject(model, version, first.GetNode()), release, nil
}

// shmHold holds the regions a request's tensors use for the request (so an
// unregister waits for it), checks every tensor's offset and size against
// its region before anything is sent (Triton's messages, inputs first, in
// request order) and puts the lease in the request for the executor. It
// returns the first region used (nil: the request uses no shared memory)
// and the CUDA region if any; all are on one node (one device for CUDA).
// release ends the holds (never nil without an error).
func (g *Gateway) shmHold(ctx context.Context, req *inference.ModelInferRequest) (first, cuda *busv1.ShmRegion, release func(), err error) {
	delete(req.Parameters, shm.LeaseParam) // only a gateway sets it
	var uses []shmUse
	for _, in := range req.GetInputs() {
		ref, ok, err := shm.FromParams(in.GetName(), in.GetParameters(), false)
		if err != nil {
			return nil, nil, nil, err
		}
		if ok {
			uses = append(uses, shmUse{in.GetName(), ref})
		}
	}
	for _, out := range req.GetOutputs() {
		ref, ok, err := shm.FromParams(out.GetName(), out.GetParameters(), false)
		if err != nil {
			return nil, nil, nil, err
		}
		if ok {
			uses = append(uses, shmUse{out.GetName(), ref})
		}
	}
	if len(uses) == 0 {
		return nil, nil, func() {}, nil
	}

	names := make([]string, 0, len(uses))
	for _, u := range uses {
		names = append(names, u.ref.Region)
	}
	holder := newID()
	expires := time.Now().Add(g.cfg.RequestTimeout)
	if d, ok := ctx.Deadline(); ok {
		expires = d
	}
	actx, cancel := shmCtx(ctx)
	held, err := g.registry().Acquire(actx, holder, names, expires.Add(shmHoldMargin))
	cancel()
	if err != nil {
		return nil, nil, nil, err
	}
	release = func() { g.shmRelease(holder, names) }
	if len(held) == 0 {
		release = func() {} // nothing was held
	}
	regions := make(map[string]*busv1.ShmRegion, len(held))
	for _, r := range held {
		regions[r.GetName()] = r
	}
	fail := func(err error) (*busv1.ShmRegion, *busv1.ShmRegion, func(), error) {
		release()
		return nil, nil, nil, err
	}
	for _, u := range uses {
		r, ok := regions[u.ref.Region]
		if !ok {
			return fail(tritonerr.NotFoundf("Unable to find shared memory region: '%s'", u.ref.Region))
		}
		if err := shm.CheckRange(u.ref.Region, r.GetByteSize(), u.ref.Offset, u.ref.ByteSize); err != nil {
			return fail(err)
		}
		if first == nil {
			first = r
		} else if r.GetNode() != first.GetNode() {
			return fail(tritonerr.InvalidArgf("shared memory regions '%s' and '%s' are on different nodes ('%s', '%s'): a request can only use regions of one node",
				first.GetName(), r.GetName(), first.GetNode(), r.GetNode()))
		}
		if r.GetKind() == busv1.ShmKind_SHM_KIND_CUDA {
			if cuda != nil && cuda.GetDeviceId() != r.GetDeviceId() {
				return fail(tritonerr.InvalidArgf("CUDA shared memory regions '%s' and '%s' are on different devices (%d, %d): a request can only use regions of one device",
					cuda.GetName(), r.GetName(), cuda.GetDeviceId(), r.GetDeviceId()))
			}
			cuda = r
		}
	}
	lease := &busv1.ShmLease{Holder: holder, Regions: held}
	if err := shm.SetLease(req, lease); err != nil {
		return fail(err)
	}
	return first, cuda, release, nil
}

// shmInputSizes gives, by input index, the byte size of each input kept in
// shared memory (for infer.NormalizeShm); nil when there is none.
func shmInputSizes(req *inference.ModelInferRequest) map[int]uint64 {
	var sizes map[int]uint64
	for i, in := range req.GetInputs() {
		if ref, ok, err := shm.FromParams(in.GetName(), in.GetParameters(), false); err == nil && ok {
			if sizes == nil {
				sizes = map[int]uint64{}
			}
			sizes[i] = ref.ByteSize
		}
	}
	return sizes
}

// shmRelease ends a request's holds. It runs after the client's context
// may have ended, so it has its own; a failure only delays a deferred
// unregister until the hold lapses.
func (g *Gateway) shmRelease(holder string, names []string) {
	ctx, cancel := shmCtx(context.Background())
	defer cancel()
	if err := g.registry().Release(ctx, holder, names); err != nil {
		g.log.Warn("releasing shared memory holds failed; they lapse by themselves", "holder", holder, "err", err)
	}
}
