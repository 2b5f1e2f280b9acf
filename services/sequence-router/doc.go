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
// Requests of one sequence on one ModelStreamInfer stream are numbered by
// the gateway (SequenceRequest.stream, stream_seq) and sent without waiting
// for answers; the router enqueues them in that order (waiting at most
// 2 s for a missing one, which outlasts the gateway's delay before sending
// again a request no router took), so a stream's requests queue up at once
// and batch as Triton's do.
//
// A decoupled model's request carries the gateway's stream window
// (SequenceRequest.stream_window, passed on in SequenceWork): the executor
// that runs it streams its responses to the gateway's reply subject
// (bus.Conn.ReplyStream) instead of one reply. The router is not involved
// in the stream: as in Triton, the sequence's next request may run once
// the executor pulls again, when the previous request's execution has
// returned, even while its responses still flow.
//
// Cancellation: the router follows the gateway's cancellation of every
// request it holds (bus.Conn.TrackRequest, on bus.CancelSubject). A
// request still in the batcher is cancelled there with Triton's rules
// (pkg/seqbatch Cancel: it fails with CANCELLED and ends its sequence); one
// waiting for its turn on its stream or for the model's config is answered
// at once and cancelled when it reaches the batcher. A request already in a
// batch on an executor is the executor's, which hears the same
// cancellation; until the executor reports the batch done, the router
// publishes it again, so that an executor that heard the first one before
// the batch arrived need not rely on the bus's short memory of early
// cancellations. The request's cancellation key (bus.Conn.RequestKey)
// travels in the batch (busv1.SequenceWork.cancel_key) and with the
// cancellation the router publishes again: the executor follows only a
// cancellation with the key, as the router does.
//
// A request in the middle of a sequence thus costs gateway -> router ->
// executor (over the held pull's reply) -> gateway: one NATS leg more than a
// stateless request, and no store access. Batches form while an instance is
// busy, because it asks for the next one only when it is done.
//
// # Shared memory
//
// A request whose tensors are in registered shared-memory regions is held
// and checked by the gateway as a stateless one is (the regions stay held,
// so an unregister waits, until the answer is back); the shm lease travels
// inside the encoded ModelInferRequest, which the router carries unread,
// and the executor that runs the batch reads the inputs from and writes
// the outputs into the regions in place. Regions are node-local and the
// router does not place batches by node: in the standalone server and in
// single-node constellations its executors are on the regions' node. An
// executor on another node fails such a request with UNAVAILABLE naming
// the region's node and its own (the rest of the batch runs). The executor
// also neither reads nor writes a region once the client's deadline has
// passed, since the gateway then no longer holds it.
//
// # State and failover
//
// The store sees START (bind or backlog), END and idle releases, backlog
// moves and executor losses; nothing else. Each model version has its own
// lease in the store, so one router at a time serves a model and models
// spread over routers. The protocol's decisions are pkg/failover's pure
// core (a clock passed in, actions returned); this package performs them
// (failover.go):
//
//   - Claim: an executor instance whose pull finds no router (or no answer,
//     or a batch older than its fence) publishes it on
//     bus.SequenceClaimSubject with its fence epoch; every router hears it
//     and tries to take the lease (at most every 200 ms per model), with
//     an epoch above the store's counter and above every fence reported
//     (failover.Floor), a fencing token.
//   - Renewal: a lease loop per model, on its own goroutine and under a
//     lock of its own, renews every LeaseTTL/4 (failover.Lease). Past
//     LeaseTTL/2 without an accepted renewal the model is suspended:
//     requests queue, no batch goes out, a renewal is sent at once; an
//     accepted renewal resumes it, so a late renewal fails nothing. Past
//     LeaseTTL, or when the store gives the lease to another router, the
//     router steps down. Store writes check the epoch (Lua), so a late
//     router cannot change its successor's bindings; a refused write asks
//     for a renewal at once. A renewal that finds nobody holding the lease
//     and no newer epoch handed out (the store lost its data) takes it
//     back at the same epoch.
//   - Stepping down (a typed failover.Reason) refuses everything the router
//     holds and has not handed to an executor (slots, backlog, requests
//     waiting for a config) as not run (bus.NotTaken: their gateways send
//     them to the next router), and releases the lease unless another
//     router holds it.
//   - Takeover: the new holder restores the bindings and backlog order
//     (sequences continue where they were; the idle clock restarts),
//     subscribes, and announces its epoch on bus.SequenceTakeoverSubject.
//     Executors raise their fence and answer with their fence epoch and the
//     tokens of the requests they run or answered in the last seconds
//     (failover.Holdings); a fence above the new epoch makes the router
//     step down and take a higher one. Gateways send the tokens of the
//     requests they still wait for (SequenceRequest.resolve, on the infer
//     subject, which the router handles in arrival order, so it comes after
//     every request the gateway sent before it). Tokens nobody holds, still
//     missing after failover.ResolveGrace, were held by the dead router:
//     the router will never run them (failover.Takeover), and the gateway
//     sends those requests again at once under new tokens. No request runs
//     twice; gateways resend only requests provably not run (no router
//     received them, a router refused them without acting, or the new
//     router declared them lost), within the request's deadline and at
//     most the gateway's ResendLimit.
//   - A START whose binding the store cannot record while Redis restarts,
//     loads its data set (LOADING; redisconn.Transient) or does not answer
//     within the store's bound on a write (storeAway), or after the
//     router lost its lease, is refused as not run and sent again by its
//     gateway; other requests of a sequence need no Redis. No request of
//     a sequence runs before the store has its binding: a sequence waiting
//     in the backlog takes a freed slot only once the store recorded it
//     there, and keeps waiting (trying again, spaced) while it cannot; a
//     router that steps down meanwhile refuses it as not run. A binding
//     replaces any other the store still has in that slot (an END whose
//     unbind failed, or not answered yet), so that a takeover restores
//     the sequence that holds the slot.
//
// Every goroutine the service starts (lease loops, takeovers, resolves,
// drains) belongs to its routines.Group, stopped and waited for by Run.
// Pulls held across a NATS reconnect are dropped (their replies would be
// lost; the instances pull again), and executors are not expired for the
// silence of an outage.
//
// Executors are tracked through their heartbeats: one that withdraws, stops
// beating for bus.HeartbeatExpiry or comes back with a new generation loses
// its slots; its sequences are forgotten (their next request fails with the
// START error naming it: the model's state for them is gone) and requests
// queued or running on it fail with UNAVAILABLE. A model with durable state
// (parameter state_durability "redis") loses nothing: its sequences move to
// other instances' free slots (or the front of the backlog) with the
// request each instance was running first, and their first request there
// is marked resume (busv1.SequenceWork.resume), so that the executor reads
// the state from Redis (services/executor, durable.go).
package seqrouter
