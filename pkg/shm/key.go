package shm

import (
	"strings"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Dir is where POSIX shared-memory objects live on Linux.
const Dir = "/dev/shm"

// ReservedPrefix starts the keys of Triton's Python backend; clients may not
// register them.
const ReservedPrefix = "triton_python_backend_shm_region_"

// nameMax is NAME_MAX: the longest file name /dev/shm takes.
const nameMax = 255

// ValidateKey checks the key a client registers region name with, with
// Triton's messages (INVALID_ARG): not all slashes, not the reserved prefix,
// and (beyond Triton, which leaves these to shm_open) nothing that could
// name a file other than one directly under Dir.
func ValidateKey(name, key string) error {
	obj := strings.TrimLeft(key, "/")
	if obj == "" || strings.ContainsAny(obj, "/\x00") || obj == "." || obj == ".." || len(obj) > nameMax {
		return tritonerr.InvalidArgf("cannot register shared memory region '%s' - invalid shm key '%s'", name, key)
	}
	if strings.HasPrefix(obj, ReservedPrefix) {
		return tritonerr.InvalidArgf("cannot register shared memory region '%s' with key '%s' as the key contains the reserved prefix '%s'",
			name, key, ReservedPrefix)
	}
	return nil
}

// path is the file a valid key names. It refuses (ok false) any key
// ValidateKey would refuse, so that no caller can reach outside Dir even
// if it skipped validation.
func path(key string) (string, bool) {
	obj := strings.TrimLeft(key, "/")
	if obj == "" || strings.ContainsAny(obj, "/\x00") || obj == "." || obj == ".." || len(obj) > nameMax {
		return "", false
	}
	return Dir + "/" + obj, true
}
