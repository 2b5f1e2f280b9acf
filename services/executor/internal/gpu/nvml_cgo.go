//go:build linux && cgo

package gpu

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

var nvmlMu sync.Mutex

// Discover lists the GPUs NVML sees. Without libnvidia-ml.so.1, or when
// NVML fails to initialise, it returns an error wrapping ErrNoGPU and makes
// no further NVML call (calling one after a failed Init would crash).
func Discover() ([]Device, error) {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML: %s", ErrNoGPU, nvmlError(ret))
	}
	defer nvml.Shutdown()
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlDeviceGetCount: %s", ErrNoGPU, nvmlError(ret))
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: NVML found no device", ErrNoGPU)
	}
	devs := make([]Device, 0, n)
	for i := range n {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvmlDeviceGetHandleByIndex(%d): %s", i, nvmlError(ret))
		}
		d := Device{Index: i}
		d.Name, _ = h.GetName()
		d.UUID, _ = h.GetUUID()
		if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			b := pci.BusId[:]
			for j, c := range b {
				if c == 0 {
					b = b[:j]
					break
				}
			}
			d.BusID = normalizeBusID(string(b))
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// nvmlError names a return code without calling into NVML (ErrorString is
// itself an NVML call, unsafe when the library did not load).
func nvmlError(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "driver not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission"
	}
	return fmt.Sprintf("NVML error %d", int(ret))
}
