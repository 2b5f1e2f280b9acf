// Package shmregistry is the shared-memory registry: the authority on the
// regions clients register with Triton's shared memory extension (system
// and CUDA, one name space). Regions live in a store, Redis or (standalone)
// memory, so that a restarted registry still knows every region and any
// number of registries can serve side by side; gateways ask over NATS for
// every operation and keep no copy that could go stale.
//
// On the bus (subjects in pkg/bus, messages in api/busv1/shm.proto; queue
// group bus.QueueShmRegistry):
//
//   - bus.ShmRegisterSubject: add a region the gateway has validated;
//     ALREADY_EXISTS "shared memory region '<name>' already in manager"
//     when the name is taken, atomically even across registries (Redis:
//     one Lua script checks and inserts).
//   - bus.ShmUnregisterSubject: remove one region of a kind, or all of a
//     kind; unknown names and regions of the other kind are a silent
//     success, as in Triton.
//   - bus.ShmStatusSubject: list or look up, with Triton's NOT_FOUND
//     messages.
//   - bus.ShmAcquireSubject / bus.ShmReleaseSubject: holds.
//   - bus.ShmRemovedSubject(node): published when a region is gone for
//     good, so that the node's executors unmap it.
//
// Who validates: the gateway that receives a register call. The client
// that registers a region runs on the gateway's node (Triton's shared
// memory is same-host), so that gateway sees the /dev/shm the key names:
// it checks the key, opens the object, checks offset and size and test-maps
// it (pkg/shm.Inspect) before asking the registry to record the region with
// the gateway's node. CUDA handles are checked by the executor that owns
// the device on that node (bus.ShmCudaSubject). The registry itself touches
// no memory and can run anywhere.
//
// Deferred unregister. Triton keeps a region registered while requests in
// flight use it (the request holds a reference) and removes it when the
// last one ends. Across processes that reference is a hold: the gateway
// acquires the regions a request names (one registry round trip, which
// also returns their metadata) before sending it on, and releases them
// when the answer is back. Unregister removes a region nobody holds at
// once, and otherwise marks it awaiting unregister; the release that ends
// the last hold removes it. Every hold carries an expiry (the request's
// deadline plus a margin), and a sweeper removes awaiting regions whose
// holds have all lapsed, so a gateway that crashed mid-request cannot pin a
// region for ever. Executors keep their own count of the requests using a
// mapping and unmap only when the region is removed and that count is zero.
package shmregistry
