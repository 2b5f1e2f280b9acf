// Package cbackend runs Triton's backends — shared libraries built against
// Triton's C backend API (libtriton_<name>.so) — inside the executor, adapted
// to the Go backend API of pkg/backend so that batching, sequences and
// statistics have one implementation for Go and C backends.
//
// The server side of the API (the TRITONSERVER_* and TRITONBACKEND_*
// functions backends import) is implemented here: simple accessors in C
// (abi.c), the calls a backend makes on the requests of a running
// execution recorded in C and replayed by Go once Execute returns (exec.c),
// everything else that reaches the executor as cgo exports (exports.go).
// The binary that links this package exports them all dynamically
// (-Wl,--export-dynamic), so a backend's undefined symbols bind to them:
// the dynamic loader searches the executable before any library.
// Backends also name libtritonserver.so as a needed library; the loader
// satisfies that by opening Nereid's stub of that name (built by make build,
// found next to the executable, or on the loader's path) before the first
// backend, so that its soname is taken and the stub's empty functions are
// never bound.
//
// Memory: the C side of an execution's requests lies in one arena of C
// memory the instance reuses. Input buffers handed to a backend are copies
// in it for small inputs, else the request's bytes, pinned for as long as
// the backend holds the request; output buffers are C memory for small
// outputs of a recorded execution (copied into the response when it is
// replayed), else Go memory pinned until the request is disposed of (or
// the output's place in a client's region). No Go memory is reachable from
// C after that. A GPU or MODEL instance executes on its own locked OS
// thread; a CPU instance on the scheduler's, one execution at a time
// (runnerFor).
//
// The Go side, by concern: the model and its configuration (model.go); the
// threads an instance's calls run on (thread.go); the instance, its arena
// and one execution from lay-out to its requests' end (instance.go,
// request.go); the replay of what the backend recorded during an
// execution (replay.go); a request while a backend holds it, from handle to
// disposal (crequest.go); and its outputs and responses (outputs.go).
package cbackend
