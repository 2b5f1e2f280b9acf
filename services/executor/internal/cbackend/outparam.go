//go:build cgo

package cbackend

import "unsafe"

// Pointers the executor hands a backend through memory the backend owns
// (the out-parameters of TRITONBACKEND_OutputBuffer, ResponseFactoryNew,
// StateNew and the like) are stored as integers. A plain pointer store
// runs the garbage collector's write barrier, which also marks the slot's
// old value: backends pass their out-parameters uninitialized, and stack
// garbage that happens to point into the Go heap gets a freed object
// marked, which the collector reports as "found pointer to free object"
// and dies (golang/go#19928; cgo's documentation asks not to let Go store
// pointers into uninitialized C memory). What is stored is C memory or
// pinned Go memory, which the collector has no need to hear about.

// setOut stores v in *out, an out-parameter in the backend's memory.
func setOut[T any](out **T, v *T) {
	*(*uintptr)(unsafe.Pointer(out)) = uintptr(unsafe.Pointer(v))
}

// setOutPointer stores v in *out, a void** out-parameter in the backend's
// memory.
func setOutPointer(out *unsafe.Pointer, v unsafe.Pointer) {
	*(*uintptr)(unsafe.Pointer(out)) = uintptr(v)
}
