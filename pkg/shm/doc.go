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
// # Faults: a client's mapping can vanish under the reader
//
// A registered region belongs to the client, which can truncate its object
// at any moment; touching a page past the new end raises SIGBUS, which
// would kill the whole process. Size checks (Check) narrow the window but
// cannot close it: the object can shrink between the check and the read.
// So every read and write of a Mapping's Data happens inside Guard, which
// turns the fault into a *Fault error for the request that made it (Read,
// Write and Copy guard themselves). Whoever catches a Fault asks the
// mappings involved whether it was theirs (Contains), Poisons that one (it
// then fails every Check: the client must unregister and register the
// region again) and fails only the request that used it.
//
// Guard relies on the Go runtime (runtime/debug.SetPanicOnFault), which
// covers Go code on the guarding goroutine only. Code that Guard cannot
// cover must never be given a pointer into a Mapping, unless the mapping
// is Protected:
//
//   - C code (cgo, a C backend): a fault in C is fatal whatever Go does.
//     An executor running C backends sets a Watcher (SetWatcher): a SIGBUS
//     handler installed from C catches faults in watched mappings, puts
//     zero pages over the mapping so that the faulting code goes on, and
//     reports the mapping poisoned (Poisoned, Check); every other SIGBUS
//     goes on to the Go runtime's handler. A Protected mapping may be
//     handed to C as it is; the request that used it fails afterwards if
//     it was poisoned. A mapping that is not (no Watcher, or the handler
//     not installed) gets private copies instead: Mapping.Read into
//     C-allocated (or pinned Go) buffers before the call, Mapping.Write
//     of private outputs after it returns.
//   - goroutines started by guarded code: each must call Guard itself.
//
// With the handler installed, a fault in a watched mapping never reaches
// Guard either: Go code reads zeros there, and Read, Write and Check report
// the poisoning.
//
// Errors are *tritonerr.Error with Triton's kinds and messages
// (TRITON-BEHAVIOUR.md §2.1), ready to be returned to a client.
package shm
