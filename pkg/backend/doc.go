// Package backend is Nereid's backend API: the Go counterpart of Triton's
// TRITONBACKEND API, with the same life cycle, so that a model that runs in
// a Triton backend has an obvious home here.
//
// # Life cycle
//
// A backend registers a Factory under a name, usually in an init function:
//
//	func init() { backend.Register("mybackend", newBackend) }
//
// A model selects it with `backend: "mybackend"` in its config.pbtxt (or,
// when `backend` is empty, through `platform`, see Name). The executor then
// calls, in this order:
//
//	Factory(ctx)                    TRITONBACKEND_Initialize, once per process
//	Backend.NewModel(ctx, info)     TRITONBACKEND_ModelInitialize, per model version
//	Model.NewInstance(ctx, info)    TRITONBACKEND_ModelInstanceInitialize, per instance
//	Instance.Execute(ctx, reqs)     TRITONBACKEND_ModelInstanceExecute, per batch
//	Instance.Finalize()             when the model unloads
//	Model.Finalize()
//	Backend.Finalize()              when the executor stops
//
// One model version has one instance per instance_group entry × count
// (Instances). An error from NewModel or NewInstance fails the model
// version's load; its message is shown in the repository index and the
// model is not ready, while other models keep serving.
//
// # Execution
//
// Execute receives a batch of one or more requests. The executor never
// calls Execute concurrently on one instance; different instances run in
// parallel. With dynamic batching the requests of a batch together hold at
// most max_batch_size inferences (the sum of their BatchSize).
//
// Each Request carries its inputs (name, tensor.DataType, shape with the
// batch dimension, bytes in Triton's binary layout, aliasing the incoming
// message), the outputs the client wants, its parameters, correlation id
// and sequence flags. Inputs have been validated against the model config
// (names, datatypes, shapes, byte sizes, BYTES framing) before Execute, so
// a backend can trust them. Every request of a model that is not
// decoupled gets exactly one answer: Respond(outputs...) or
// RespondError(err). Returning an error from Execute fails all requests not
// yet answered with that error.
//
// # Decoupled models
//
// A model with `model_transaction_policy { decoupled: true }` may send
// zero, one or many responses per request, at any time (Triton's decoupled
// transaction policy); clients receive them over gRPC ModelStreamInfer or
// HTTP generate_stream. Request.Decoupled tells the backend which policy
// applies. The request's ResponseSender (Triton's response factory) sends
// them:
//
//	s := r.ResponseSender()
//	s.Send(0, outputs...)           // a response; more may follow
//	s.SendError(0, err)             // an error response; more may follow
//	s.Send(backend.ResponseFinal, outputs...) // the last response
//	s.SendFlags(backend.ResponseFinal)        // or the end alone, after 0..n responses
//
// Execute may return before a request is finished: the instance is then
// free for the next batch while a goroutine it owns (and waits for in
// Finalize) keeps sending. Sends are delivered in the order made. A send
// blocks while the client is slower than the model (only a bounded window
// of responses is in flight per request), which is how a slow reader slows
// the model down instead of filling memory. When the client goes away
// (closes its stream or connection) Request.IsCancelled and
// ResponseSender.IsCancelled report it (TRITONBACKEND_RequestIsCancelled),
// non-final sends return a CANCELLED error and deliver nothing, and the
// backend should stop and send the final flag.
//
// ExampleResponseSender shows a decoupled backend that streams each
// element of its input back as one response.
//
// # Implicit state
//
// A sequence model whose config declares sequence_batching.state lets the
// server keep its state between the requests of a sequence (Triton's
// implicit state). The request carries the sequence's current state as an
// ordinary input named by the state's input_name (the initial state on
// START); the backend makes the next one with Request.StateNew (named by
// output_name), fills State.Buffer and calls State.Update, Triton's
// TRITONBACKEND_StateNew, TRITONBACKEND_StateBuffer and
// TRITONBACKEND_StateUpdate. Without Update the state stays as it was. A
// model without state config gets Triton's "unable to add state '<n>'.
// State configuration is missing for model '<m>'.", an unknown name
// "state '<n>' is not a valid state name.". An accumulator:
//
//	prev := r.Input("INPUT_STATE") // [1, n] INT32, zeros on START
//	in := r.Input("INPUT")
//	sum := make([]byte, len(in.Data))
//	for i := 0; i+4 <= len(in.Data); i += 4 {
//		v := binary.LittleEndian.Uint32(in.Data[i:])
//		if i+4 <= len(prev.Data) {
//			v += binary.LittleEndian.Uint32(prev.Data[i:])
//		}
//		binary.LittleEndian.PutUint32(sum[i:], v)
//	}
//	st, err := r.StateNew("OUTPUT_STATE", tensor.Int32, in.Shape)
//	if err != nil {
//		return r.RespondError(err)
//	}
//	copy(st.Buffer(len(sum)), sum)
//	if err := st.Update(); err != nil {
//		return r.RespondError(err)
//	}
//	return r.Respond(backend.Output{Name: "OUTPUT", DataType: tensor.Int32, Shape: in.Shape, Data: sum})
//
// with, in config.pbtxt:
//
//	sequence_batching {
//	  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ -1 ] } ]
//	}
//
// A client that asks for OUTPUT_STATE (allowed when the config lists it
// under output) gets the updated state even if the backend does not
// return it as an output.
//
// # Statistics
//
// Each Instance gets a StatsReporter in InstanceInfo.Stats. Report each
// request with its four Timestamps (exec start, compute start, compute end,
// exec end) before responding, and each execution with
// ReportBatchStatistics: these become the model's statistics (inference and
// execution counts, queue/compute_input/compute_infer/compute_output, and
// batch_stats per batch size). What a backend leaves unreported the
// executor reports for it, timing the whole Execute as compute_infer.
//
// # Example
//
// A backend that doubles an FP32 input:
//
//	type doubler struct{}
//
//	func (doubler) NewModel(ctx context.Context, m backend.ModelInfo) (backend.Model, error) { return doubler{}, nil }
//	func (doubler) NewInstance(ctx context.Context, i backend.InstanceInfo) (backend.Instance, error) {
//		return &doublerInstance{stats: i.Stats}, nil
//	}
//	func (doubler) Finalize() error { return nil }
//
//	type doublerInstance struct{ stats backend.StatsReporter }
//
//	func (d *doublerInstance) Execute(ctx context.Context, reqs []*backend.Request) error {
//		start := time.Now()
//		total := 0
//		for _, r := range reqs {
//			in := r.Input("IN")
//			out := make([]byte, len(in.Data))
//			for i := 0; i+4 <= len(in.Data); i += 4 {
//				v := math.Float32frombits(binary.LittleEndian.Uint32(in.Data[i:]))
//				binary.LittleEndian.PutUint32(out[i:], math.Float32bits(2*v))
//			}
//			now := time.Now()
//			d.stats.ReportStatistics(r, true, backend.Timestamps{start, start, now, now})
//			r.Respond(backend.Output{Name: "OUT", DataType: tensor.FP32, Shape: in.Shape, Data: out})
//			total += max(1, r.BatchSize)
//		}
//		end := time.Now()
//		d.stats.ReportBatchStatistics(total, backend.Timestamps{start, start, end, end})
//		return nil
//	}
//
//	func (d *doublerInstance) Finalize() error { return nil }
//
//	func init() {
//		backend.Register("doubler", func(context.Context) (backend.Backend, error) { return doubler{}, nil })
//	}
//
// with the model's config.pbtxt:
//
//	name: "double"
//	backend: "doubler"
//	max_batch_size: 8
//	input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
//	output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
//
// Link the backend into the executor by importing its package (for the
// built-in ones: the executor's internal/builtin).
package backend
