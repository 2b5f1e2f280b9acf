package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/shmbus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/cbackend"
	"github.com/nereid-io/nereid/services/executor/internal/gpu"
)

// Shared memory (Triton's extension; the protocol side is the gateway's,
// the region metadata the shm-registry's). A request that uses registered
// regions arrives on this node's subject with a lease: the regions the
// gateway holds for it, already checked against the request's offsets and
// sizes. The executor
//
//   - maps a system region on first use (MAP_SHARED, pages faulted in at
//     once) and keeps the mapping for later requests, keyed by the
//     registration's id so that a re-registered name never sees an old
//     mapping;
//   - hands the backend slices of the mapping as input data (no copy), and
//     writes outputs into their regions once the whole response is known,
//     after checking every output fits, so that an error leaves the
//     client's memory untouched;
//   - for CUDA regions (the executor owning the device), opens the IPC
//     handle once, copies inputs device-to-host for a model that reads
//     them on the host (not a C backend's GPU instances, given them in
//     place) and outputs host-to-device;
//   - drops a mapping or handle when the registry announces the region
//     removed and no request of this executor still uses it, and checks
//     its cache against the registry now and then in case an announcement
//     was missed.
//
// Without a GPU (no driver, no device, or a build without cgo) every CUDA
// path answers Triton's "GPUs not supported" and no CUDA or NVML function
// is called after the failed initialisation.

// shmReconcileInterval is how often cached mappings are checked against the
// registry.
const shmReconcileInterval = 30 * time.Second

type shmState struct {
	e   *Executor
	bus *bus.Conn

	drv     *gpu.Driver   // nil: no GPU
	gpuErr  error         // why there is none
	gpus    []gpu.Device  // NVML's inventory, for the admin API
	devices map[int64]int // client device_id (NVML index) -> CUDA ordinal
	order   []int64       // device ids owned, sorted

	sys  *refCache[*shm.Mapping] // by region id
	cuda *refCache[*gpu.IPCMem]  // by region id

	mu   sync.Mutex
	subs []*bus.Subscription
}

// startShm discovers the GPUs, subscribes to the registry's removals and,
// per owned device, to CUDA handle checks. stop undoes it.
func (e *Executor) startShm(ctx context.Context, bc *bus.Conn) (stop func(), err error) {
	s := &shmState{e: e, bus: bc, devices: map[int64]int{},
		sys:  newRefCache[*shm.Mapping]("unmapping a shared memory region", e.log),
		cuda: newRefCache[*gpu.IPCMem]("closing a CUDA IPC handle", e.log)}
	s.discover()
	if w := cbackend.ShmWatcher(); w != nil {
		// C backends read and write clients' mappings in place under the
		// C fault guard (internal/cbackend faultguard.c).
		shm.SetWatcher(w)
	}
	sub, err := bc.Subscribe(bus.ShmRemovedSubject(e.cfg.Node), s.onRemoved)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	s.subs = append(s.subs, sub)
	for _, id := range s.order {
		sub, err := bc.Handle(bus.ShmCudaSubject(e.cfg.Node, id), "", s.handleCudaCheck)
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("executor: %w", err)
		}
		s.subs = append(s.subs, sub)
	}
	e.shm = s
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	if !e.group.Go(func(context.Context) {
		defer close(done)
		t := time.NewTicker(shmReconcileInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.reconcile(ctx)
			}
		}
	}) {
		close(done)
	}
	return func() { cancel(); <-done; s.stop() }, nil
}

// discover finds the GPUs this executor owns: NVML for the inventory, the
// CUDA driver to use them. Device ids are NVML indexes, mapped to this
// process's CUDA ordinals by PCI bus id (they differ under
// CUDA_VISIBLE_DEVICES).
func (s *shmState) discover() {
	log := s.e.log
	devs, nvmlErr := gpu.Discover()
	s.gpus = devs
	drv, err := gpu.Load()
	if err != nil {
		s.gpuErr = err
		log.Info("no GPU: CUDA shared memory is not available", "reason", err)
		return
	}
	n, err := drv.DeviceCount()
	if err != nil {
		s.gpuErr = fmt.Errorf("%w: %w", gpu.ErrNoGPU, err)
		log.Warn("CUDA driver loaded but devices cannot be counted", "err", err)
		return
	}
	s.drv = drv
	byBus := map[string]int{}
	for o := range n {
		if id, err := drv.BusID(o); err == nil {
			byBus[id] = o
		}
	}
	if nvmlErr != nil {
		log.Warn("NVML unavailable; device ids are CUDA ordinals", "err", nvmlErr)
		for o := range n {
			s.devices[int64(o)] = o
			s.order = append(s.order, int64(o))
		}
	} else {
		for _, d := range devs {
			if o, ok := byBus[d.BusID]; ok {
				s.devices[int64(d.Index)] = o
				s.order = append(s.order, int64(d.Index))
				log.Info("GPU", "device_id", d.Index, "cuda_ordinal", o, "name", d.Name, "uuid", d.UUID, "bus", d.BusID)
			}
		}
	}
}

func (s *shmState) stop() {
	s.mu.Lock()
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	// Everything goes, except what a request still running (one given up
	// after the drain timeout) uses: that goes when it is released.
	s.sys.dropAll()
	s.cuda.dropAll()
}

// subscribeDevices serves mv on the subjects of the GPUs this executor
// owns, for requests whose tensors are in CUDA shared memory there.
func (s *shmState) subscribeDevices(bc *bus.Conn, mv *modelVersion) error {
	if s == nil {
		return nil
	}
	for _, id := range s.order {
		sub, err := bc.HandleBody(bus.InferDeviceSubject(mv.name, mv.vstr, s.e.cfg.Node, id), bus.QueueExecutors, mv.handleInfer)
		if err != nil {
			return fmt.Errorf("executor: serve %s version %s on GPU %d: %w", mv.name, mv.vstr, id, err)
		}
		s.mu.Lock()
		s.subs = append(s.subs, sub)
		s.mu.Unlock()
		mv.devSubs = append(mv.devSubs, sub)
	}
	return nil
}

// drainDevices lets the requests that arrived on device subjects finish.
func (s *shmState) drainDevices() {
	if s == nil {
		return
	}
	s.mu.Lock()
	subs := s.subs
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Drain()
	}
}

// onRemoved drops what was opened for a region the registry removed.
func (s *shmState) onRemoved(_ context.Context, data []byte) {
	var ev busv1.ShmRegionRemoved
	if err := proto.Unmarshal(data, &ev); err != nil {
		s.e.log.Warn("bad shared memory removal", "err", err)
		return
	}
	s.drop(ev.GetRegion().GetId())
}

func (s *shmState) drop(id string) {
	s.sys.drop(id)
	s.cuda.drop(id)
}

// reconcile drops cached regions the registry no longer has (an announced
// removal this executor missed).
func (s *shmState) reconcile(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	asked := time.Now()
	regions, err := shmbus.NewRegistry(s.bus).Status(ctx, busv1.ShmKind_SHM_KIND_UNSPECIFIED, "")
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, r := range regions {
		live[r.GetId()] = true
	}
	gone := append(s.sys.staleIDs(asked, live), s.cuda.staleIDs(asked, live)...)
	for _, id := range gone {
		s.drop(id)
	}
}

// mapSystem returns r's mapping, mapping it on first use, and counts a
// use; release with s.sys.unuse.
func (s *shmState) mapSystem(r *busv1.ShmRegion) (*refEntry[*shm.Mapping], error) {
	m, err := s.sys.use(r.GetId(), func() (*shm.Mapping, error) { return shm.Map(r.GetKey(), r.GetOffset(), r.GetByteSize()) })
	if err != nil {
		return nil, err
	}
	if m.val.Poisoned() {
		s.sys.unuse(r.GetId(), m)
		return nil, errUnusable(r.GetName())
	}
	if err := m.val.Check(); err != nil {
		s.sys.unuse(r.GetId(), m)
		return nil, err
	}
	return m, nil
}

// errUnusable is the answer for a region whose mapping faulted: its owner
// truncated the object while a request used it.
func errUnusable(region string) error {
	return tritonerr.InvalidArgf("shared memory region '%s' was truncated by its owner while in use; it is unusable until it is unregistered and registered again", region)
}

func errNoGPU(region string) error {
	return tritonerr.InvalidArgf("failed to use CUDA shared memory region: '%s', GPUs not supported", region)
}

// openCuda returns r's opened IPC handle, opening it on first use, and
// counts a use; release with s.cuda.unuse.
func (s *shmState) openCuda(r *busv1.ShmRegion) (*refEntry[*gpu.IPCMem], error) {
	if s.drv == nil {
		return nil, errNoGPU(r.GetName())
	}
	ordinal, ok := s.devices[r.GetDeviceId()]
	if !ok {
		return nil, tritonerr.InvalidArgf("CUDA shared memory region '%s' is on device %d, which executor '%s' does not own",
			r.GetName(), r.GetDeviceId(), s.e.cfg.ID)
	}
	return s.cuda.use(r.GetId(), func() (*gpu.IPCMem, error) {
		mem, err := s.drv.OpenIPC(ordinal, r.GetRawHandle())
		if err == nil && r.GetByteSize() > mem.Size {
			err = fmt.Errorf("%w: region of %d bytes in an allocation of %d", errSize, r.GetByteSize(), mem.Size)
			_ = mem.Close()
		}
		return mem, err
	})
}

// handleCudaCheck is the register-time check of a CUDA region, for the
// gateway, with Triton's messages: the handle must open on the device and
// byte_size fit the allocation. The handle stays open for the requests
// that will use the region.
func (s *shmState) handleCudaCheck(_ context.Context, data []byte) (proto.Message, error) {
	var req busv1.ShmCudaCheckRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return nil, tritonerr.InvalidArgf("malformed CUDA shared memory check: %v", err)
	}
	r := req.GetRegion()
	if s.drv == nil {
		return nil, tritonerr.InvalidArgf("failed to register CUDA shared memory region: '%s', GPUs not supported", r.GetName())
	}
	h, err := s.openCuda(r)
	if err != nil {
		// Triton logs the CUDA error and tells the client only this.
		s.e.log.Warn("CUDA shared memory region does not open", "region", r.GetName(), "device", r.GetDeviceId(), "err", err)
		if errors.Is(err, errSize) {
			return nil, tritonerr.InvalidArgf("failed to register shared memory region '%s': invalid args", r.GetName())
		}
		return nil, tritonerr.InvalidArgf("failed to register shared memory region: invalid args")
	}
	size := h.val.Size
	s.cuda.unuse(r.GetId(), h)
	return &busv1.ShmCudaCheckResponse{AllocationSize: size}, nil
}

var errSize = errors.New("byte_size larger than the allocation")

// shmRequest is what one request took: the uses to release, and where its
// outputs go.
type shmRequest struct {
	s        *shmState
	sys      []*refEntry[*shm.Mapping]
	sysIDs   []string
	sysNames []string
	cuda     []*refEntry[*gpu.IPCMem]
	cudaIDs  []string
	outputs  map[string]shmTarget
	devices  map[string]backend.Device // inputs in CUDA regions, on their GPU
	mapped   [][]byte                  // the mapped spans, to tell which output data alias them
	inputs   []int                     // the request's inputs that are slices of system regions
}

type shmTarget struct {
	region string
	sys    *refEntry[*shm.Mapping]
	cuda   *refEntry[*gpu.IPCMem]
	offset uint64
	size   uint64
}

// attach resolves a request's shared-memory tensors. Inputs become slices
// of their mappings in RawInputContents; CUDA inputs are copied to host
// memory when host says the model reads them there (hostInputs), else
// stand in by their size alone (gpu.HostStandIn) and are read in place on
// the device. Outputs are remembered for finish. A request without any
// comes back nil.
func (s *shmState) attach(req *inference.ModelInferRequest, host bool) (*shmRequest, error) {
	lease, err := shm.TakeLease(req)
	if err != nil {
		return nil, err
	}
	type use struct {
		input int // -1 for an output
		name  string
		ref   shm.Ref
	}
	var uses []use
	for i, in := range req.GetInputs() {
		ref, ok, err := shm.FromParams(in.GetName(), in.GetParameters(), false)
		if err != nil {
			return nil, err
		}
		if ok {
			uses = append(uses, use{i, in.GetName(), ref})
		}
	}
	for _, out := range req.GetOutputs() {
		ref, ok, err := shm.FromParams(out.GetName(), out.GetParameters(), false)
		if err != nil {
			return nil, err
		}
		if ok {
			uses = append(uses, use{-1, out.GetName(), ref})
		}
	}
	if len(uses) == 0 {
		return nil, nil
	}
	if lease == nil {
		return nil, tritonerr.InvalidArgf("tensor '%s' is in shared memory region '%s' but the request carries no lease; requests that use shared memory must come through a gateway",
			uses[0].name, uses[0].ref.Region)
	}
	if s == nil {
		return nil, tritonerr.Internalf("executor has no shared memory support running")
	}
	// Regions are node-local. The gateway addresses stateless requests to
	// the regions' node; a sequence request goes wherever the sequence
	// router's batch goes, which, in the standalone server and single-node
	// constellations, is this node.
	for _, r := range lease.GetRegions() {
		if r.GetNode() != s.e.cfg.Node {
			return nil, tritonerr.Unavailablef("shared memory region '%s' is on node '%s', but the executor that got the request ('%s') runs on node '%s' and cannot map it: requests that use shared memory must be served on the region's node",
				r.GetName(), r.GetNode(), s.e.cfg.ID, s.e.cfg.Node)
		}
	}
	regions := map[string]*busv1.ShmRegion{}
	for _, r := range lease.GetRegions() {
		regions[r.GetName()] = r
	}
	sr := &shmRequest{s: s}
	ok := false
	defer func() {
		if !ok {
			sr.releaseNow()
		}
	}()
	if n := len(req.GetInputs()); len(req.RawInputContents) < n {
		req.RawInputContents = append(req.RawInputContents, make([][]byte, n-len(req.RawInputContents))...)
	}
	for _, u := range uses {
		r, found := regions[u.ref.Region]
		if !found {
			return nil, tritonerr.NotFoundf("Unable to find shared memory region: '%s'", u.ref.Region)
		}
		if err := shm.CheckRange(u.ref.Region, r.GetByteSize(), u.ref.Offset, u.ref.ByteSize); err != nil {
			return nil, err
		}
		t := shmTarget{region: u.ref.Region, offset: u.ref.Offset, size: u.ref.ByteSize}
		switch r.GetKind() {
		case busv1.ShmKind_SHM_KIND_SYSTEM:
			m, err := s.mapSystem(r)
			if err != nil {
				return nil, err
			}
			sr.sys, sr.sysIDs, sr.sysNames = append(sr.sys, m), append(sr.sysIDs, r.GetId()), append(sr.sysNames, r.GetName())
			sr.mapped = append(sr.mapped, m.val.Data)
			t.sys = m
		case busv1.ShmKind_SHM_KIND_CUDA:
			h, err := s.openCuda(r)
			if err != nil {
				if s.drv == nil {
					return nil, err
				}
				return nil, tritonerr.Internalf("unable to open CUDA shared memory region '%s': %v", r.GetName(), err)
			}
			sr.cuda, sr.cudaIDs = append(sr.cuda, h), append(sr.cudaIDs, r.GetId())
			t.cuda = h
		default:
			return nil, tritonerr.Internalf("shared memory region '%s' has no kind", r.GetName())
		}
		if u.input < 0 {
			if sr.outputs == nil {
				sr.outputs = map[string]shmTarget{}
			}
			sr.outputs[u.name] = t
			continue
		}
		if t.sys != nil {
			end := t.offset + t.size
			req.RawInputContents[u.input] = t.sys.val.Data[t.offset:end:end]
			sr.inputs = append(sr.inputs, u.input)
			continue
		}
		if sr.devices == nil {
			sr.devices = map[string]backend.Device{}
		}
		sr.devices[u.name] = deviceAt(t)
		if !host && req.GetInputs()[u.input].GetDatatype() != "BYTES" {
			// Read on the device only: validation looks at its size alone
			// (a BYTES input's elements it reads, in a host copy).
			req.RawInputContents[u.input] = gpu.HostStandIn(int(t.size))
			continue
		}
		buf := make([]byte, t.size)
		if err := t.cuda.val.CopyToHost(buf, t.offset); err != nil {
			return nil, tritonerr.Internalf("copying input '%s' from CUDA shared memory region '%s': %v", u.name, u.ref.Region, err)
		}
		req.RawInputContents[u.input] = buf
	}
	ok = true
	return sr, nil
}

// finish writes the response's shared-memory outputs into their regions
// and leaves their raw contents empty, as Triton does. Every size is
// checked before anything is written. Outputs not bound for shared memory
// whose data is a slice of a mapping (an identity model) are copied, since
// the mapping may go once the request is released.
func (sr *shmRequest) finish(out *inference.ModelInferResponse) error {
	if sr == nil {
		return nil
	}
	raw := out.GetRawOutputContents()
	for i, o := range out.GetOutputs() {
		t, ok := sr.outputs[o.GetName()]
		if !ok || i >= len(raw) {
			continue
		}
		if n := uint64(len(raw[i])); n > t.size {
			return tritonerr.Internalf("shared memory size specified with the request for output '%s' (%d bytes) should be at least %d bytes to hold the results",
				o.GetName(), t.size, n)
		}
	}
	for i, m := range sr.sys {
		if m.val.Poisoned() {
			// A fault absorbed while the request ran (a C backend, or Go
			// code once the C guard is installed): what it read or wrote
			// there is zeros.
			return errUnusable(sr.sysNames[i])
		}
		if err := m.val.Check(); err != nil {
			return err
		}
	}
	for i, o := range out.GetOutputs() {
		if i >= len(raw) {
			break
		}
		t, ok := sr.outputs[o.GetName()]
		if !ok {
			if sr.aliases(raw[i]) {
				src := raw[i]
				raw[i] = make([]byte, len(src))
				if err := sr.guard(func() error { copy(raw[i], src); return nil }); err != nil {
					return err
				}
			}
			continue
		}
		data := raw[i]
		if t.sys != nil && sr.inPlace(t, data) {
			// Produced in the region by the backend (OutputPlace).
		} else if t.sys != nil {
			// The output may itself lie in a mapping (an identity model
			// echoing a shared-memory input): the guard covers both sides.
			if err := sr.guard(func() error { copy(t.sys.val.Data[t.offset:t.offset+uint64(len(data))], data); return nil }); err != nil {
				return err
			}
		} else if err := t.cuda.val.CopyFromHost(t.offset, data); err != nil { // empty when produced on the device (OutputDevice): nothing to copy
			return tritonerr.Internalf("copying output '%s' to CUDA shared memory region '%s': %v", o.GetName(), t.region, err)
		}
		raw[i] = []byte{}
	}
	return nil
}

// inPlace reports whether data is the output's place in its region: the
// backend wrote it there.
func (sr *shmRequest) inPlace(t shmTarget, data []byte) bool {
	if len(data) == 0 || uint64(len(data)) > t.size {
		return false
	}
	return unsafe.SliceData(data) == unsafe.SliceData(t.sys.val.Data[t.offset:])
}

// outputPlace is backend.Request.OutputPlace: the slice of the system
// region an output is bound for, when it fits and the mapping is under the
// C fault guard (which the code writing there may need).
func (sr *shmRequest) outputPlace(name string, size int) []byte {
	t, ok := sr.outputs[name]
	if !ok || t.sys == nil || size <= 0 || uint64(size) > t.size || !t.sys.val.Protected() || t.sys.val.Poisoned() {
		return nil
	}
	end := t.offset + uint64(size)
	return t.sys.val.Data[t.offset:end:end]
}

// bindOutputs lets the backend produce r's shared-memory outputs in place:
// in system regions through the mapping, in CUDA regions on the device.
func (sr *shmRequest) bindOutputs(r *backend.Request) {
	if sr == nil || len(sr.outputs) == 0 {
		return
	}
	r.OutputPlace = sr.outputPlace
	for _, t := range sr.outputs {
		if t.cuda != nil {
			r.OutputDevice = sr.outputDevice
			break
		}
	}
}

// outputDevice is backend.Request.OutputDevice: the place in its CUDA
// region an output is bound for, when it fits. What the backend writes
// there is the output: finish copies nothing over it (the response's data
// for it is empty).
func (sr *shmRequest) outputDevice(name string, size int) (backend.Device, bool) {
	t, ok := sr.outputs[name]
	if !ok || t.cuda == nil || size <= 0 || uint64(size) > t.size {
		return backend.Device{}, false
	}
	return deviceAt(t), true
}

// deviceAt is where target t lies on its GPU.
func deviceAt(t shmTarget) backend.Device {
	return backend.Device{Ptr: t.cuda.val.Ptr() + uintptr(t.offset), ID: int64(t.cuda.val.Ordinal())}
}

// bindInputDevices gives r's inputs that came in CUDA regions their place
// on the GPU (their Data is a host copy, or for a model that reads them on
// the device a stand-in: see attach), once r's inputs are set.
func (sr *shmRequest) bindInputDevices(r *backend.Request) {
	if sr == nil || len(sr.devices) == 0 {
		return
	}
	for i := range r.Inputs {
		if d, ok := sr.devices[r.Inputs[i].Name]; ok {
			r.Inputs[i].Device = &d
		}
	}
}

// hostInputs reports whether a model reads its inputs in host memory: all
// do but a C backend's whose instances are all on GPUs, which it gives an
// input that came in CUDA shared memory in place (internal/cbackend).
func hostInputs(cfg *inference.ModelConfig, cBackend bool) bool {
	if !cBackend || len(cfg.GetInstanceGroup()) == 0 {
		return true
	}
	for _, g := range cfg.GetInstanceGroup() {
		if g.GetKind() != inference.ModelInstanceGroup_KIND_GPU {
			return true
		}
	}
	return false
}

// privatize replaces the request's inputs that lie in system regions with
// private copies, for backends whose code the fault guard of Go cannot
// cover (C backends), unless the mapping is under the C fault guard
// (Mapping.Protected): a client truncating its object must fail its
// request, not kill the executor inside a backend.
func (sr *shmRequest) privatize(req *inference.ModelInferRequest) error {
	if sr == nil {
		return nil
	}
	for _, i := range sr.inputs {
		if sr.protected(req.RawInputContents[i]) {
			continue // read in place
		}
		src := req.RawInputContents[i]
		dst := make([]byte, len(src))
		if err := sr.guard(func() error { copy(dst, src); return nil }); err != nil {
			return err
		}
		req.RawInputContents[i] = dst
	}
	return nil
}

// guard runs fn, which may touch the request's mappings, under shm.Guard
// (sr may be nil: then there are none, but fn is guarded all the same). A
// fault in one of the mappings poisons it, so that the region fails every
// later request until the client registers it again, and comes back as an
// error naming the region; a fault elsewhere is not the client's doing
// and comes back as it is.
func (sr *shmRequest) guard(fn func() error) error {
	err := shm.Guard(fn)
	if err == nil {
		return sr.absorbed()
	}
	f, ok := shm.AsFault(err)
	if !ok {
		return err
	}
	if ferr := sr.faulted(f); ferr != nil {
		return ferr
	}
	return tritonerr.Internalf("memory fault outside any shared memory region: %v", f)
}

// absorbed returns the request's error when the C fault guard absorbed a
// fault in one of its mappings (Go code touching it then reads zeros
// instead of panicking).
func (sr *shmRequest) absorbed() error {
	if sr == nil {
		return nil
	}
	for i, m := range sr.sys {
		if m.val.Poisoned() {
			return errUnusable(sr.sysNames[i])
		}
	}
	return nil
}

// faulted poisons the request's mapping that f hit and returns the
// request's error, or nil when f is in none of them.
func (sr *shmRequest) faulted(f *shm.Fault) error {
	if sr == nil {
		return nil
	}
	for i, m := range sr.sys {
		if m.val.Contains(f.Addr) {
			m.val.Poison()
			return errUnusable(sr.sysNames[i])
		}
	}
	return nil
}

// protected reports whether b lies in a mapping under the C fault guard.
func (sr *shmRequest) protected(b []byte) bool {
	for _, m := range sr.sys {
		if m.val.Protected() && m.val.Contains(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) {
			return true
		}
	}
	return false
}

// aliases reports whether b lies in one of the request's mappings.
func (sr *shmRequest) aliases(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, m := range sr.mapped {
		if len(m) == 0 {
			continue
		}
		start := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
		if p >= start && p < start+uintptr(len(m)) {
			return true
		}
	}
	return false
}

// release ends the request's uses once nothing can touch its memory any
// more: at once, or, when the request was given up while a backend may
// still run it, when it completes.
func (sr *shmRequest) release(p *pending) {
	if sr == nil {
		return
	}
	if !p.cancelled.Load() {
		sr.releaseNow()
		return
	}
	p.whenDone(sr.releaseNow)
}

func (sr *shmRequest) releaseNow() {
	if sr == nil {
		return
	}
	for i, m := range sr.sys {
		sr.s.sys.unuse(sr.sysIDs[i], m)
	}
	for i, h := range sr.cuda {
		sr.s.cuda.unuse(sr.cudaIDs[i], h)
	}
	sr.sys, sr.sysIDs, sr.sysNames, sr.cuda = nil, nil, nil, nil
}
