//go:build !unix

package fdlimit

import "errors"

// Limit is RLIMIT_NOFILE: Soft is the limit in force, Hard the most the
// soft limit may be raised to.
type Limit struct {
	Soft, Hard uint64
}

// Get reads the limit; no such limit here.
func Get() (Limit, error) { return Limit{}, errors.ErrUnsupported }

// Raise raises the soft limit to the hard one; no such limit here.
func Raise() (Limit, error) { return Limit{}, errors.ErrUnsupported }

// Open counts the descriptors the process has open; not known here.
func Open() (int, error) { return 0, errors.ErrUnsupported }
