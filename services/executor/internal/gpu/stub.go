//go:build !linux || !cgo

package gpu

import "fmt"

// Built without cgo (or off Linux) the executor cannot reach a GPU: every
// entry point reports ErrNoGPU.

var errNoCgo = fmt.Errorf("%w: executor built without cgo", ErrNoGPU)

// Driver is the CUDA driver; never obtained in this build.
type Driver struct{}

// IPCMem is opened device memory; never obtained in this build.
type IPCMem struct{ Size uint64 }

// Ordinal is never a device in this build.
func (m *IPCMem) Ordinal() int { return -1 }

// DeviceMem is allocated device memory; never obtained in this build.
type DeviceMem struct {
	Handle []byte
	Size   uint64
}

// Load reports ErrNoGPU.
func Load() (*Driver, error) { return nil, errNoCgo }

// LoadLibrary reports ErrNoGPU.
func LoadLibrary(string) (*Driver, error) { return nil, errNoCgo }

// Discover reports ErrNoGPU.
func Discover() ([]Device, error) { return nil, errNoCgo }

func (d *Driver) DeviceCount() (int, error)             { return 0, errNoCgo }
func (d *Driver) BusID(int) (string, error)             { return "", errNoCgo }
func (d *Driver) Close() error                          { return nil }
func (d *Driver) OpenIPC(int, []byte) (*IPCMem, error)  { return nil, errNoCgo }
func (d *Driver) Alloc(int, uint64) (*DeviceMem, error) { return nil, errNoCgo }
func (m *IPCMem) CopyToHost([]byte, uint64) error       { return errNoCgo }
func (m *IPCMem) CopyFromHost(uint64, []byte) error     { return errNoCgo }
func (m *IPCMem) Close() error                          { return nil }
func (m *DeviceMem) Write(uint64, []byte) error         { return errNoCgo }
func (m *DeviceMem) Read([]byte, uint64) error          { return errNoCgo }
func (m *DeviceMem) Free() error                        { return nil }
func (m *DeviceMem) Ptr() uintptr                       { return 0 }
func (m *IPCMem) Ptr() uintptr                          { return 0 }

// Sampler reads GPU metrics; never obtained in this build.
type Sampler struct{}

// OpenSampler reports ErrNoGPU in this build.
func OpenSampler() (*Sampler, error) { return nil, errNoCgo }

// Read has nothing to read in this build.
func (s *Sampler) Read() []Reading { return nil }

// ProcessMemory has no GPU to read in this build.
func (s *Sampler) ProcessMemory(int) []uint64 { return nil }

// Close does nothing in this build.
func (s *Sampler) Close() {}
