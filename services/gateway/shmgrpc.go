package gateway

import (
	"context"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
)

// The shared memory RPCs. Status answers a map keyed by region name;
// register and unregister need --allow-client-shm; an empty name in
// unregister means every region of the kind. Register checks neither the
// name nor the size of a CUDA handle up front, as Triton's gRPC front end
// does not (its HTTP one does): what its shared memory manager answers
// for them is answered (registerSystemShm, registerCudaShm).

func (s *grpcService) SystemSharedMemoryStatus(ctx context.Context, req *inference.SystemSharedMemoryStatusRequest) (*inference.SystemSharedMemoryStatusResponse, error) {
	regions, err := s.g.shmStatus(ctx, busv1.ShmKind_SHM_KIND_SYSTEM, req.GetName())
	if err != nil {
		return nil, err
	}
	resp := &inference.SystemSharedMemoryStatusResponse{Regions: map[string]*inference.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for _, r := range regions {
		resp.Regions[r.GetName()] = &inference.SystemSharedMemoryStatusResponse_RegionStatus{
			Name: r.GetName(), Key: r.GetKey(), Offset: r.GetOffset(), ByteSize: r.GetByteSize()}
	}
	return resp, nil
}

func (s *grpcService) SystemSharedMemoryRegister(ctx context.Context, req *inference.SystemSharedMemoryRegisterRequest) (*inference.SystemSharedMemoryRegisterResponse, error) {
	if !s.g.cfg.AllowClientShm {
		return nil, errShmDisabled
	}
	if err := s.g.registerSystemShm(ctx, req.GetName(), req.GetKey(), req.GetOffset(), req.GetByteSize()); err != nil {
		return nil, err
	}
	return &inference.SystemSharedMemoryRegisterResponse{}, nil
}

func (s *grpcService) SystemSharedMemoryUnregister(ctx context.Context, req *inference.SystemSharedMemoryUnregisterRequest) (*inference.SystemSharedMemoryUnregisterResponse, error) {
	if err := s.g.shmUnregister(ctx, busv1.ShmKind_SHM_KIND_SYSTEM, req.GetName()); err != nil {
		return nil, err
	}
	return &inference.SystemSharedMemoryUnregisterResponse{}, nil
}

func (s *grpcService) CudaSharedMemoryStatus(ctx context.Context, req *inference.CudaSharedMemoryStatusRequest) (*inference.CudaSharedMemoryStatusResponse, error) {
	regions, err := s.g.shmStatus(ctx, busv1.ShmKind_SHM_KIND_CUDA, req.GetName())
	if err != nil {
		return nil, err
	}
	resp := &inference.CudaSharedMemoryStatusResponse{Regions: map[string]*inference.CudaSharedMemoryStatusResponse_RegionStatus{}}
	for _, r := range regions {
		resp.Regions[r.GetName()] = &inference.CudaSharedMemoryStatusResponse_RegionStatus{
			Name: r.GetName(), DeviceId: uint64(r.GetDeviceId()), ByteSize: r.GetByteSize()}
	}
	return resp, nil
}

func (s *grpcService) CudaSharedMemoryRegister(ctx context.Context, req *inference.CudaSharedMemoryRegisterRequest) (*inference.CudaSharedMemoryRegisterResponse, error) {
	if !s.g.cfg.AllowClientShm {
		return nil, errShmDisabled
	}
	// Triton reads the handle as a cudaIpcMemHandle_t, its first 64 bytes;
	// a shorter one does not open.
	handle := req.GetRawHandle()
	if len(handle) > cudaIpcHandleSize {
		handle = handle[:cudaIpcHandleSize]
	}
	if err := s.g.registerCudaShm(ctx, req.GetName(), handle, req.GetDeviceId(), req.GetByteSize()); err != nil {
		return nil, err
	}
	return &inference.CudaSharedMemoryRegisterResponse{}, nil
}

func (s *grpcService) CudaSharedMemoryUnregister(ctx context.Context, req *inference.CudaSharedMemoryUnregisterRequest) (*inference.CudaSharedMemoryUnregisterResponse, error) {
	if err := s.g.shmUnregister(ctx, busv1.ShmKind_SHM_KIND_CUDA, req.GetName()); err != nil {
		return nil, err
	}
	return &inference.CudaSharedMemoryUnregisterResponse{}, nil
}
