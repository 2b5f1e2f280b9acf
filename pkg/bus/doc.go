// Package bus carries Nereid's protobuf requests, replies and events over
// NATS: request/reply with deadlines, trace context and Triton-kinded errors
// that survive the hop, transparent chunking of bodies larger than the
// server's max payload, and the subject names every service shares.
//
// # Using it
//
//	c, _ := bus.New(nc)                                     // one per NATS connection
//	err := c.Request(ctx, bus.InferSubject("simple", "1"), req, resp)
//	sub, _ := c.Handle(bus.InferSubject("simple", "1"), bus.QueueExecutors, h)
//	defer sub.Drain()
//
// Request returns only *tritonerr.Error: the responder's error with its kind
// and message, UNAVAILABLE when nothing serves the subject ("no executor is
// serving model 'simple' version 1"), when the deadline passes ("request to
// model 'simple' version 1 timed out") or the responder goes away (its
// connection, or its answers to liveness probes), and CANCELLED when ctx is
// cancelled.
//
// # Wire format
//
// Bodies are protobuf. Headers (NATS headers, case-sensitive keys):
//
//	Nereid-Deadline    requester's deadline, Unix nanoseconds, decimal; absent = none.
//	                   A responder refuses (UNAVAILABLE) a request whose deadline has
//	                   passed and runs the handler under that deadline.
//	Nereid-Key         the request's cancellation key, hexadecimal: random, known to
//	                   the requester and the responder only (see Cancellation).
//	traceparent, ...   OpenTelemetry context, written by the global propagator
//	                   (otel.GetTextMapPropagator) through HeaderCarrier.
//	Nereid-Error-Kind  on a reply: the request failed; Triton's kind name
//	                   (INVALID_ARG, NOT_FOUND, UNAVAILABLE, UNSUPPORTED, INTERNAL,
//	                   ALREADY_EXISTS, CANCELLED, UNKNOWN). The body is empty.
//	Nereid-Error       the message, with '%', control characters and a leading or
//	                   trailing space written as %XX (upper-case hex).
//
// A request that fits in one message and would carry its deadline and key
// alone in headers (no trace context) has no headers: its body starts with
// an envelope, 0x00 0x02, the deadline in Unix nanoseconds as 8 bytes
// big-endian (0: none) and the key as 8 bytes, then the protobuf body (no
// protobuf encoding starts with 0x00). An envelope 0x00 0x01 and the
// deadline alone (no key) is read too.
//
// A reply without Nereid-Error-Kind is a success; a reply with no headers at
// all is the whole body. A request is a message to the subject with a reply
// subject; every message for that request comes back to that reply subject,
// under the requester's own wildcard inbox subscription:
//
//	<inbox prefix of the role>.<nuid>.<class>.<nonce>.<n>
//
// class names the roles that may answer (ReplyClass: "executor" for an
// inference request, "executor_sequence-router" for a sequence request,
// "all" for settings; for a private inbox of a transfer, the peer's role),
// nonce is random and n counts the Conn's inboxes. The NATS permissions
// (permissions.go) let a role publish only under the classes it belongs
// to; the requester takes a message only on the exact subject of an inbox
// in use, and refuses and counts (ForgedReplies) one that names an inbox
// number in use on another subject: another class, or a guessed nonce.
//
// # Chunks
//
// A body that does not fit in one message (body plus headers above the
// server's max payload) travels in chunks of equal size, the last shorter,
// numbered from 0 in Nereid-Chunk. The first chunk also carries Nereid-Size,
// the total body size; the receiver checks it against its limit (default
// 2 GiB), then allocates the body once and copies each chunk into place.
// Every chunk message has a reply subject: the sender's acknowledgement
// inbox. The receiver acknowledges each chunk there with Nereid-Ack: <n>
// (everything up to and including n has arrived); the sender keeps at most a
// window of unacknowledged chunks in flight (8 MiB by default, at least two
// chunks), so no transfer can overrun a subscriber's pending limits however
// large it is. NATS delivers one publisher's messages in order, so a chunk
// out of sequence is a protocol error.
//
// Chunked request (the subject may be a queue group: the responder that
// takes chunk 0 gets all the others):
//
//	requester -> subject          Nereid-Size: N, Nereid-Chunk: 0, deadline, trace; reply R
//	responder -> R                Nereid-Continue: C   (C is the responder's private
//	                              subject; this also acknowledges chunk 0)
//	requester -> C                Nereid-Chunk: 1..k, reply R
//	responder -> R                Nereid-Ack: 1..k
//	responder -> R                the reply (one message, an error, or chunks as below)
//
// Chunked reply (to a request of either form):
//
//	responder -> R                Nereid-Size: N, Nereid-Chunk: 0, reply A
//	responder -> R                Nereid-Chunk: 1..k, reply A
//	requester -> A                Nereid-Ack: 0..k
//
// Either side may send Nereid-Abort (any value) to the other's subject (C or
// A) to give up; a side that hears neither chunk nor acknowledgement for the
// idle timeout (default 15 s), or whose deadline passes, gives up too. NATS's
// own "no responders" status (503) on a chunk's reply subject tells the
// sender that the receiver's connection is gone. Subjects of finished
// transfers are forgotten; late messages to them are dropped.
//
// # Codec
//
// Request encodes with the Conn's Codec (WithCodec; default protobuf), which
// may return the message in parts: a body is sent without joining them,
// chunks being cut across parts, so a message carrying a large tensor is
// never copied into one buffer. Replies are decoded with the same Codec,
// which may keep references into the received body; handlers' replies are
// encoded with it too.
//
// # Cancellation
//
// A requester whose ctx is cancelled (not one whose deadline passed: the
// responder holds the deadline already) publishes the request's reply
// subject R, a space and its key in hexadecimal, as the body, on
// CancelSubject ("nereid.v1.cancel"). Every Conn that handles requests
// subscribes there and cancels the ctx of the handler serving R (cause:
// the requester cancelled) when the key is the request's, so that nobody
// but the requester (not even another Conn of its role, which may read its
// role's inboxes) can cancel it; a process serving a request it did not
// receive learns its key from the process that passed it on (the sequence
// router sends it in the batch and forwards cancellations with it; the
// executor follows them with TrackRequestKey); one that knows no key
// (TrackRequest) follows any cancellation naming R. So a handler can drop work
// that has not started, such as a request still waiting in a batcher's
// queue. The cancellation may overtake its request (two subscriptions are
// dispatched independently); it is then remembered for a few seconds and
// applied when the request arrives. Nothing is sent for requests that end
// normally.
//
// # Liveness
//
// A requester that has heard nothing on a request's reply subject R for one
// to two sweep intervals (WithLiveness, default 1 s; one goroutine per Conn
// sweeps every request in flight) publishes ProbeID(R) (16 bytes of its
// SHA-256: every role reads the probes, and must not learn R), back to
// back with the others of that sweep, on AliveSubject ("nereid.v1.alive").
// Every Conn that handles requests subscribes there and answers for each R
// it holds whose id is listed
// (a handler running or queued, a delegated request not yet answered or
// released, a request held with Hold) with an empty message carrying
// Nereid-Alive: 1 on R; the requester counts it as word and drops it.
// After two unanswered probes the request fails with UNAVAILABLE: the
// responder was lost, and the request may or may not have run. A responder
// also sends that answer unasked, once per sweep of its own, on the reply
// subject of each request it has held through a whole interval, since a
// probe may reach it late (behind large transfers its connection is still
// reading); and a requester counts no silence while its own connection lags
// (its reply subscription has undispatched messages, or a PING sent after
// the previous sweep's probes has not had its PONG).
//
// # Streamed replies
//
// A request with HeaderStream (Nereid-Stream: W, the requester's window in
// messages) may be answered by many messages (Conn.Stream, StreamOf):
//
//	requester -> subject          Nereid-Stream: W, Nereid-Ask: 1, deadline, trace; reply R (chunked as above if large)
//	responder -> R                Nereid-Stream: open; reply A (A: the responder's private subject)
//	responder -> R                Nereid-Seq: 0, 1, ...; reply A; a body, or an error
//	                              (Nereid-Error-Kind, Nereid-Error); the last one has Nereid-End
//	requester -> A                Nereid-Credit: n (messages consumed); reply R
//
// The responder sends message s only while s < n + W (the end excepted, so
// a full window never holds back the last message), and waits for credit
// otherwise: a slow consumer slows the producer, and at most W messages of
// one stream are ever queued. While the window is full, small messages
// (no error, up to 64 KiB) gather into one batch message, Nereid-Batch: k,
// whose body is k items each as a 4-byte little-endian length and the
// bytes (at most 256 items, 64 KiB); it goes out when credit comes, so a
// producer faster than its consumer sends fewer, larger messages. A
// requester that puts Nereid-Ask: 1 on its request answers any stream
// message carrying Nereid-Ask with credit as soon as it consumes it; its
// responder then batches as soon as two messages are in flight (marking
// with Nereid-Ask each message sent with two or more in flight), so a fast
// producer sends a few large batches, each released by the credit for the
// one before. The requester sends credit after each half
// window consumed, on Nereid-Ask, and every StreamPing; a responder that waits for credit
// resends "open" every StreamPing. Either message's reply subject then gets
// NATS's "no responders" (503) when the other side's connection is gone,
// which ends the stream with an error on the requester's side (UNAVAILABLE)
// or cancels the handler on the responder's side. A credit that reaches a
// Conn with no stream under A is answered with Nereid-Abort, so a requester
// never waits on a stream its responder has forgotten. A requester that gives up
// before the end publishes R on CancelSubject as for any request. A refusal
// before streaming (an error reply without Nereid-Seq) ends the stream too.
//
// A delegated request (HandleDelegated) is streamed the same way by the
// process it was handed to (Conn.ReplyStream): that process opens the
// stream on R with its own private subject, and its TrackRequest follows
// the requester's cancellation. A requester whose request may wait in a
// queue before anyone opens its stream (Conn.StreamQueued) sets no idle
// timeout until "open" arrives.
//
// # In-process
//
// Services of one process (the standalone server) may share a Local
// (WithLocal): a Request or Stream to a subject that a queue-group handler
// of that Local serves is then handed to it in-process, the request and
// reply messages passed as Go values (Body.Message), with the semantics
// above minus the wire; everything else still goes over NATS. See
// local.go for the ownership of the messages handed over.
//
// # Subjects
//
// Names that come from users (models, versions, executor ids) are escaped
// into one subject token by Token: letters, digits, '-' and '_' stay, every
// other byte is '~' and two upper-case hex digits, and the empty string is
// "~". See subject.go for the subjects themselves.
//
// # Key-value state
//
// One piece of cluster state lives in NATS itself rather than with a
// service: the models loaded through the repository API in explicit model
// control mode, in the JetStream key-value bucket LoadedModelsBucket (keys
// from LoadedModelKey: Token's escaping with '=' for '~', as keys allow
// fewer characters than tokens). Executors write and read it; the routes
// in permissions.go grant them the bucket's JetStream API subjects and
// nothing else of JetStream.
package bus
