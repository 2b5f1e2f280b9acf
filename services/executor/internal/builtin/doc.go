// Package builtin holds Nereid's built-in backends. Importing it (the
// executor does) registers them with pkg/backend:
//
//   - "addsub": two inputs, two outputs of one datatype; OUTPUT0 is the
//     element-wise sum of the inputs and OUTPUT1 their difference (the
//     first input minus the second). Integer types wrap as Triton's int8
//     example does (computed wide, cast back); FP32 and FP64 compute in
//     their own precision; BYTES elements are decimal integers (int32) and
//     the results are decimal strings. This serves Triton's example models
//     simple, simple_int8 and simple_string.
//
//   - "identity": every input is returned as the output at the same
//     position in the config (INPUTn -> OUTPUTn), for any datatype and
//     shape, bytes unchanged (BYTES elements keep embedded NUL bytes). The
//     model parameter execute_delay_ms delays each execution, which tests
//     and benchmarks use to make batching observable. The model parameter
//     output_repeat (a positive number n; not for BYTES inputs) makes each
//     output its input with every row of the last dimension written n
//     times in a row (shape [.., k] becomes [.., k*n]; at most 1 GiB), a
//     large output from a small input, as the response cache's benchmark
//     needs. This serves Triton's simple_identity.
//
//   - "implicit_state": an INT32 accumulator kept in the server's implicit
//     state (OUTPUT_STATE = INPUT + INPUT_STATE, OUTPUT = OUTPUT_STATE), with
//     the test cases of Triton's implicit-state test backend (TEST_CASE 1:
//     no state update; parameter state_name: ask for another state). It
//     serves implicit_accumulate and its variants.
//
//   - "repeat", "square" (decoupled): Triton's repeat and square example
//     backends, serving repeat_int32 and square_int32; "words" (decoupled or
//     not): streams the words of a BYTES text_input back as text_output, for
//     the generate extension. Their responses come from goroutines the
//     instance owns, after Execute returns; they stop when the client goes
//     away (Request.IsCancelled) and always end with the final flag.
//
//   - "sequence_repeat" (decoupled, with a sequence batcher): one response
//     per element of IN, each with the running sum of the sequence's IN
//     elements so far (OUT) and its index (IDX), paced by an optional
//     DELAY; the sums are computed in Execute and the responses sent after
//     it returns, so the sequence's next request runs while the previous
//     one still streams. It serves sequence_repeat_int32.
//
// They handle each request of a batch on its own, so dynamic batching
// works with any shapes, and report Triton's per-request and per-batch
// statistics.
package builtin
