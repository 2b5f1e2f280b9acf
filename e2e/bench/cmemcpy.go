package bench

/*
#include <string.h>

static void nereid_bench_memcpy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
*/
import "C"

import (
	"bytes"
	"errors"
	"unsafe"
)

// CMemcpy is Memcpy done by the C library's memcpy: the copy a C backend
// makes (the C identity copies its input into its output with memcpy), so
// that a C backend's path is measured against the copy it cannot avoid.
// Go's copy and the C library's memcpy differ on some processors by as
// much as twice (the C library's choice of rep movsb or non-temporal
// stores for large copies), which Memcpy against CMemcpy reports.
func CMemcpy(size int) Worker { return copying(size, cmemcpy) }

// copying is a Worker that copies size bytes between two buffers with
// cp, comparing them on full runs.
func copying(size int, cp func(dst, src []byte)) Worker {
	return func(int) (Op, func(), error) {
		src := FP32Payload(size)
		dst := make([]byte, len(src))
		cp(dst, src)
		return func(full bool) error {
			cp(dst, src)
			if full && !bytes.Equal(dst, src) {
				return errors.New("memcpy lost bytes")
			}
			return nil
		}, nil, nil
	}
}

// cmemcpy copies src into dst (of the same length) with the C library's
// memcpy. The buffers hold no Go pointers, so C may be handed them.
func cmemcpy(dst, src []byte) {
	if len(src) == 0 {
		return
	}
	C.nereid_bench_memcpy(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)))
}
