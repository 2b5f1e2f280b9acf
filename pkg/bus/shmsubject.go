package bus

import "strconv"

// Subjects of the shared-memory extension (services/shm-registry and the
// executors that map regions). They live beside subject.go, built the same
// way: names escaped with Token, nothing assembled elsewhere.

// QueueShmRegistry is the queue group shm-registries join, so that each
// request is served by one of them (they share their store).
const QueueShmRegistry = "shm-registry"

const shmPrefix = Prefix + ".shm."

// The registry's operations, each on its own subject:
//
//	ShmRegisterSubject   busv1.ShmRegisterRequest   -> busv1.ShmRegisterResponse
//	ShmUnregisterSubject busv1.ShmUnregisterRequest -> busv1.ShmUnregisterResponse
//	ShmStatusSubject     busv1.ShmStatusRequest     -> busv1.ShmStatusResponse
//	ShmAcquireSubject    busv1.ShmAcquireRequest    -> busv1.ShmAcquireResponse
//	ShmReleaseSubject    busv1.ShmReleaseRequest    -> busv1.ShmReleaseResponse
const (
	ShmRegisterSubject   = shmPrefix + "register"
	ShmUnregisterSubject = shmPrefix + "unregister"
	ShmStatusSubject     = shmPrefix + "status"
	ShmAcquireSubject    = shmPrefix + "acquire"
	ShmReleaseSubject    = shmPrefix + "release"
)

// ShmRemovedSubject carries busv1.ShmRegionRemoved for regions of node, so
// that its executors drop their mappings:
// "nereid.v1.shm.removed.<Token(node)>".
func ShmRemovedSubject(node string) string {
	return shmPrefix + "removed." + Token(node)
}

// ShmCudaSubject is where the executor owning GPU device on node answers
// busv1.ShmCudaCheckRequest: "nereid.v1.shm.cuda.<Token(node)>.<device>".
func ShmCudaSubject(node string, device int64) string {
	return shmPrefix + "cuda." + Token(node) + "." + strconv.FormatInt(device, 10)
}

// InferDeviceSubject is where the executor owning GPU device on node serving
// version of model also listens (queue QueueExecutors), for requests whose
// tensors are in CUDA shared memory on that device:
// InferNodeSubject(model, version, node) + ".gpu.<device>".
func InferDeviceSubject(model, version, node string, device int64) string {
	return InferNodeSubject(model, version, node) + ".gpu." + strconv.FormatInt(device, 10)
}
