package gpu

import "errors"

// ErrNoGPU is wrapped by every error that means "no usable GPU here": no
// driver library, no device, or a build without cgo.
var ErrNoGPU = errors.New("GPUs not supported")

// HandleSize is sizeof(cudaIpcMemHandle_t).
const HandleSize = 64

// Device is a GPU found by Discover.
type Device struct {
	// Index is NVML's index: the device's place in PCI bus order, which is
	// what a client's device_id means when the client sees every GPU
	// (CUDA_DEVICE_ORDER=PCI_BUS_ID).
	Index int
	Name  string
	UUID  string
	// BusID is the PCI bus id ("00000000:3B:00.0"), which ties an NVML
	// device to this process's CUDA ordinal.
	BusID string
}
