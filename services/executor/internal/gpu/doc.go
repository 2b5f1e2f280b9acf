// Package gpu is the executor's access to NVIDIA GPUs: discovery, metrics
// and the memory the executor's process uses on each GPU with NVML
// (github.com/NVIDIA/go-nvml), and the few CUDA driver calls that CUDA
// shared memory needs (open a cudaIpcMemHandle_t another process exported,
// find the allocation's size, copy to and from it, close it).
//
// Nothing is linked against CUDA: libnvidia-ml.so.1 and libcuda.so.1 are
// loaded at run time (dlopen), so the executor builds and runs on machines
// without a GPU or a driver. There, Discover and Load return an error
// wrapping ErrNoGPU, and no NVML or CUDA function is ever called after a
// failed initialisation (a call through an unresolved symbol would kill the
// process). Driver symbols are resolved by their versioned names
// (cuIpcOpenMemHandle_v2, cuMemcpyDtoH_v2, ...), as the CUDA headers map
// them.
//
// Why cgo rather than github.com/ebitengine/purego: go-nvml needs cgo
// anyway, so purego would add a dependency without removing cgo from the
// executor; and cuIpcOpenMemHandle takes its 64-byte CUipcMemHandle by
// value, which the C ABI passes on the stack, something cgo does for us
// while purego does not support struct arguments on Linux. The C side is a
// small table of function pointers filled by dlsym; each Go call makes one
// cgo call, which pushes the device's primary context, does the work and
// pops it on the same OS thread. Built without cgo (CGO_ENABLED=0) or off
// Linux, the package compiles to stubs that report ErrNoGPU. cgo stays in
// this package (STYLE.md: quarantined to the executor).
package gpu
