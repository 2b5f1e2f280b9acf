//go:build cgo

package cbackend

/*
#include <stdint.h>
int nereid_guard_install(void);
int nereid_guard_installed(void);
int nereid_guard_watch(uintptr_t start, uintptr_t len);
void nereid_guard_unwatch(int slot);
int nereid_guard_poisoned(int slot);
uint64_t nereid_guard_absorbed(void);
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/nereid-io/nereid/pkg/shm"
)

// ShmWatcher returns the watcher of clients' mappings whose faults the C
// fault guard (faultguard.c) absorbs once installed: with it, C backends
// read inputs in a client's system shared memory in place and write
// outputs straight into their regions.
func ShmWatcher() shm.Watcher { return faultWatcher{} }

type faultWatcher struct{}

func (faultWatcher) Watch(data []byte) shm.Watch {
	slot := C.nereid_guard_watch(C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(data)))), C.uintptr_t(len(data)))
	if slot < 0 {
		return nil // table full: the mapping is copied for C code, as without the guard
	}
	return guardSlot(slot)
}

type guardSlot C.int

func (s guardSlot) Protected() bool { return C.nereid_guard_installed() != 0 }
func (s guardSlot) Poisoned() bool  { return C.nereid_guard_poisoned(C.int(s)) != 0 }
func (s guardSlot) Unwatch()        { C.nereid_guard_unwatch(C.int(s)) }

// installFaultGuard installs the SIGBUS handler, once, before the first C
// backend runs. The Go runtime has installed its own by then: the guard
// forwards it every fault outside a watched mapping.
func installFaultGuard() error {
	if rc := C.nereid_guard_install(); rc != 0 {
		return fmt.Errorf("installing the SIGBUS handler for shared memory: %w", syscall.Errno(rc))
	}
	return nil
}

// AbsorbedFaults counts the faults in clients' mappings the guard has
// absorbed since the process started.
func AbsorbedFaults() uint64 { return uint64(C.nereid_guard_absorbed()) }
