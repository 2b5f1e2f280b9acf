// Package shm is Nereid's view of POSIX shared memory as Triton's shared
// memory extension uses it: which keys may name a region, how a region is
// checked when it is registered (Inspect), how a request's offset and size
// are checked against it (CheckRange), how a tensor's shared_memory_*
// parameters are read (FromParams), and how a region is mapped (Map) or
// made (Create, for clients and tests).
//
// Keys follow glibc's shm_open: leading slashes are dropped and what is left
// names one file directly under /dev/shm. Anything that could name another
// file (a slash inside the name, "." or "..", a NUL byte) is refused before
// the file system is touched, so a key can never reach outside /dev/shm;
// symbolic links are not followed and only regular files are accepted.
//
// Errors are *tritonerr.Error with Triton's kinds and messages
// (TRITON-BEHAVIOUR.md §2.1), ready to be returned to a client.
package shm
