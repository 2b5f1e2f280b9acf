package repository

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/nereid-io/nereid/pkg/modelconfig"
)

// Stamp is the newest modification time (Unix nanoseconds) of what version
// v of the model in dir loads from: everything under the version directory,
// and the model directory's other files and folders (labels, initial state,
// shared weights), but neither config.pbtxt, which is compared as a
// configuration, nor the other versions. As Triton's poll and load do
// (ModelTimestamp), a version whose stamp changed since it was loaded is
// loaded again; the others keep serving. An unreadable path counts as 0,
// so that a transient error does not make a model look changed forever.
func Stamp(dir string, v int64) int64 {
	newest := newestUnder(filepath.Join(dir, strconv.FormatInt(v, 10)), 0)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return newest
	}
	for _, e := range entries {
		name := e.Name()
		if name == modelconfig.FileName {
			continue
		}
		if _, ok := parseVersion(name); ok {
			continue // a version directory: this version's own is above
		}
		newest = max(newest, newestUnder(filepath.Join(dir, name), 0))
	}
	return newest
}

// maxStampDepth bounds the descent, so that a symbolic link looping back
// up the tree ends it.
const maxStampDepth = 32

// newestUnder is the newest modification time of path and, for a directory,
// of everything below it (symbolic links followed).
func newestUnder(path string, depth int) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	newest := st.ModTime().UnixNano()
	if !st.IsDir() || depth >= maxStampDepth {
		return newest
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return newest
	}
	for _, e := range entries {
		newest = max(newest, newestUnder(filepath.Join(path, e.Name()), depth+1))
	}
	return newest
}
