// Package respcache is Nereid's response cache: Triton's response cache
// (tritonserver --cache-config, a model's response_cache { enable: true })
// with a key that tells apart what Triton's does not, kept in memory per
// gateway or shared by every gateway in Redis.
//
// The parts:
//
//   - Key: a SHA-256 of the model, its version, the cache generation of
//     the model, every input's name, datatype, shape and bytes, the
//     requested outputs with their parameters and the request's parameters
//     that may change the result. Triton's key (cache_manager.cc Hash) is a
//     64-bit boost hash of the model, the version and the inputs' names and
//     bytes only.
//   - LRU: the local cache's pure core, bounded by bytes, with a TTL, the
//     clock passed in.
//   - Redis: the shared store, one round trip per lookup (one MGET reads
//     the model's generation and the entry of the generation last seen;
//     a second GET only when a reload moved the generation), a key prefix
//     per model and version, entries written with a TTL.
//   - Cache: what a gateway holds: the store, the generations, the stores
//     still pending (bounded in bytes, written by one goroutine after the
//     response has gone) and the failures of the shared store, which never
//     fail a request.
//
// An entry is the response as protobuf encodes it (Triton's
// ModelInferResponse), without its id: a hit gets the id of the request
// it answers.
package respcache
