// Package seqrouter is the sequence router: Triton's sequence batcher
// (pkg/seqbatch) as a service. It binds sequences to executor instance
// slots, keeps the backlog and the idle timers, and hands batches to
// executor instances when they ask for them; bindings and backlog order live
// in a store (Redis, or memory in standalone mode) so that another router
// can take over.
//
// # Protocol
//
// Gateway -> router, bus.SequenceInferSubject(model, version), queue
// bus.QueueRouters: busv1.SequenceRequest (the typed correlation id, START,
// END, the timeout parameter and the encoded ModelInferRequest). The router
// does not answer it itself when it runs: it queues the request and keeps
// the gateway's reply subject (bus.HandleDelegated); the executor that runs
// the request answers the gateway directly with the ModelInferResponse. The
// router answers only errors it finds itself (START missing, backlog full,
// backlog timeout, executor lost).
//
// Executor instance -> router, bus.SequencePullSubject(model, version), same
// queue: busv1.SequencePull ("instance i of executor e, generation g, is
// idle; batch b is done"). The router holds the pull until a batch is ready
// for that instance (at most PullHold, then an empty batch) and answers with
// busv1.SequenceBatch: the requests in slot order with their control values,
// padding for idle direct slots, each with the gateway's reply subject and
// deadline. A router that does not know the model yet answers need_config;
// the executor pulls again with its model config.
//
// A request in the middle of a sequence thus costs gateway -> router ->
// executor (over the held pull's reply) -> gateway: one NATS leg more than a
// stateless request, and no store access. Batches form while an instance is
// busy, because it asks for the next one only when it is done.
//
// # State and failover
//
// The store sees START (bind or backlog), END and idle releases, backlog
// moves and executor losses; nothing else. One router is active at a time:
// it holds a lease in the store (renewed every LeaseTTL/3) and only then
// subscribes to the sequence subjects. A standby takes the lease when it
// lapses, reads the bindings and backlog order of each model as its
// executors introduce themselves, and carries on: sequences continue where
// they were (the idle clock restarts at the takeover). Requests the old
// router held when it died are not run by anyone (their gateways time out),
// so no request runs twice; gateways resend only requests no router received
// (NATS "no responders").
//
// Executors are tracked through their heartbeats: one that withdraws, stops
// beating for bus.HeartbeatExpiry or comes back with a new generation loses
// its slots; its sequences are forgotten (their next request fails with the
// START error: the model's state for them is gone) and requests queued or
// running on it fail with UNAVAILABLE.
package seqrouter
