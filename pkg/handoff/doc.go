// Package handoff moves large tensors between a gateway and an executor on
// the same node without sending their bytes over NATS (DESIGN.md §5: 16 MiB
// over NATS costs about three HTTP echoes). The bus still carries the
// request and the reply; only the bulk moves aside:
//
//   - RouteNode (another process on this node): the sender creates a file in
//     Dir (/dev/shm), sized exactly, maps it, fills it once (an HTTP body is
//     read straight into it, a gRPC request is decoded into it), and names
//     it with the tensors' spans in the request parameter Param, sent to
//     bus.InferNodeSubject so that an executor of this node takes it. The
//     receiver maps the file, slices its inputs from the mapping without a
//     copy and unlinks the file at once: both sides have it mapped. Outputs
//     come back the same way in a file the executor creates, except outputs
//     that lie in the request's file (an identity model returns its input),
//     which are named by their span there and not copied at all.
//   - RouteProcess (gateway and executor in one process, the standalone
//     server): the tensors are handed over as slices through an in-process
//     exchange named in Param; nothing is copied or mapped.
//   - RouteBus (no executor on this node): no hand-off; the bus chunks the
//     bytes. It is also the fallback whenever a file cannot be made.
//
// Gateway side: Prepare, Outgoing.Finish, Outgoing.Release (and
// Outgoing.Undo: when no executor of the node takes the request, or the one
// that does cannot open the file — it claims the node without sharing its
// /dev/shm — Accept answers bus.NotTaken, nothing has run, and the gateway
// puts the inputs back and sends the request over the bus). Executor side:
// Accept, Incoming.Reply, Incoming.Release. Memory is reference counted
// (Region), so bytes stay mapped while anyone reads them.
//
// Nothing leaks: a request file is unlinked by the receiver as soon as it
// has mapped it and by the sender when the request returns, whatever the
// outcome; a response file is unlinked by the gateway when it maps it, and
// removed by the executor shortly after the request's deadline if the
// gateway gave up; an exchange is closed by the gateway when the request
// returns; Sweep removes the files of processes that died between creating
// and handing over a file (names carry the creator's pid). Clients cannot
// send Param (Prepare refuses it), so no request can name another's files.
//
// Descriptor format (Param's string value):
//
//	f;<file>;<size>[;<index>:<f|q>:<offset>:<len>]...   spans in the named file (f) or,
//	                                                     in a response, the request's file (q)
//	p;<key>                                              an in-process exchange
package handoff
