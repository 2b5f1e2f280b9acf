// Package gateway is Nereid's front door: it terminates NVIDIA Triton's
// protocol, KServe v2 over HTTP/REST (Triton's JSON, binary tensor data,
// gzip/deflate compression) and gRPC (inference.GRPCInferenceService and
// grpc.health.v1), and forwards inference to the executors over NATS.
//
// A gateway keeps no state besides its view of the catalog, which it builds
// from executor heartbeats (bus.HeartbeatSubject): a new executor, or one
// whose generation changed, is asked for its catalog; one that withdraws or
// misses heartbeats for bus.HeartbeatExpiry is dropped. A model version is
// READY when any live executor serves it READY, and requests for it go to
// bus.InferSubject(model, version), where the executors serving it share a
// queue group. Statistics and the nv_inference_* metrics are the sums of what
// every executor reports, gathered when asked for, and of what every gateway
// counts itself (the ensemble requests it ran, its response cache's hits and
// misses; bus.GatewayStatsSubject). Any number of gateways can therefore run
// side by side.
//
// Use:
//
//	g, err := gateway.New(gateway.Config{Conn: nc, HTTPAddr: ":8000", GRPCAddr: ":8001", MetricsAddr: ":8002"})
//	...
//	go g.Run(ctx)
//	<-g.Ready()
//
// Decoupled models (decoupled.go) answer a request with any number of
// responses: the gateway opens a bus stream to an executor
// (bus.Conn.Stream) and hands each response on as it arrives, on the
// ModelStreamInfer stream or as a server-sent event of the generate
// extension (generate.go: POST .../generate and .../generate_stream).
// The stream's credits let the executor run only a bounded window ahead of
// the client; closing the stream or the connection cancels the request in
// the backend. A decoupled model with a sequence batcher goes through the
// sequence router like any sequence model (bus.Conn.StreamQueued: the
// request may wait for its sequence's slot); the executor that runs it
// streams the responses straight back (bus.Conn.ReplyStream).
//
// Readiness (/v2/health/ready, ServerReady, grpc.health.v1 Check) follows
// Triton's non-strict readiness adapted to a constellation: the gateway is
// connected to NATS, at least one executor has reported its catalog, and no
// executor is still loading a model. A model that failed to load does not
// make the server unready; it shows in the repository index with its reason.
//
// Where Triton's answer depends on its single process, the gateway keeps
// Triton's wording but picks the code that holds across processes: a model
// whose versions all went away with their executors, or are still loading,
// fails with UNAVAILABLE (HTTP 503, retryable) instead of Triton's NOT_FOUND.
package gateway
