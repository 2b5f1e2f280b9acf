//go:build unix

package fdlimit

import (
	"os"
	"runtime"
	"syscall"
)

// Limit is RLIMIT_NOFILE: Soft is the limit in force, Hard the most the
// soft limit may be raised to.
type Limit struct {
	Soft, Hard uint64
}

// Get reads the limit.
func Get() (Limit, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return Limit{}, err
	}
	return Limit{Soft: uint64(r.Cur), Hard: uint64(r.Max)}, nil
}

// Raise sets the soft limit to the hard one, when it is below it, and
// returns the limit then in force.
func Raise() (Limit, error) {
	l, err := Get()
	if err != nil || l.Soft >= l.Hard {
		return l, err
	}
	r := syscall.Rlimit{Cur: l.Hard, Max: l.Hard}
	if runtime.GOOS == "darwin" && r.Cur > 1<<20 {
		r.Cur = 1 << 20 // macOS refuses more than its kernel's maximum (kern.maxfilesperproc)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return l, err
	}
	return Get()
}

// Open counts the descriptors the process has open, where the system lists
// them (/proc/self/fd on Linux, /dev/fd elsewhere).
func Open() (int, error) {
	dir := "/proc/self/fd"
	if runtime.GOOS != "linux" {
		dir = "/dev/fd"
	}
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(1024)
		n += len(names)
		if err != nil || len(names) == 0 {
			break
		}
	}
	return n - 1, nil // not the one listing them
}
