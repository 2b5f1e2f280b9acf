// Package infer checks an inference request against its model's
// configuration the way Triton's core does before a request reaches a
// backend (InferenceRequest::Normalize and ValidateRequestInputs), with
// Triton's error messages, and turns it into the backend's view of the
// request (pkg/backend): batch size split off, reshape applied, input data
// sliced from the message without copying, requested outputs resolved, and
// the sequence parameters turned into a correlation id and flags.
//
//	r := backend.NewRequest(ctx, complete)
//	if err := infer.Normalize(cfg, req, r); err != nil {
//		return err // INVALID_ARG, e.g. "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]"
//	}
//
// Checks, in Triton's order: requested outputs exist; the number of inputs
// (naming the missing ones); every input is known; batch sizes agree and do
// not exceed max_batch_size; datatypes; shapes against the config dims
// (-1 matching anything); then byte sizes, and BYTES framing, via pkg/tensor.
// Messages carry Triton's "[request id: X] " prefix when the request has an
// id.
package infer
