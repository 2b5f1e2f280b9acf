// Package kserve is the HTTP/REST infer codec of the KServe v2 protocol with
// Triton's binary tensor data extension. It converts between HTTP bodies and
// Triton's own protobuf messages (inference.ModelInferRequest and
// ModelInferResponse), which is what the gateway sends over the bus, and
// brings gRPC requests to the same form:
//
//   - DecodeInferRequest reads a JSON request header, optionally followed by
//     binary input blocks (Inference-Header-Content-Length), into a
//     ModelInferRequest whose raw_input_contents holds every input's bytes in
//     the binary layout, one entry per input. Binary inputs alias the body;
//     JSON `data` is decoded straight into a buffer sized from the shape.
//   - DecodeRawRequest reads a raw binary request (header length 0) with the
//     help of the model configuration, as Triton does.
//   - EncodeInferResponse writes Triton's JSON response, with binary outputs
//     appended after the JSON header where the request asked for them.
//   - ContentsToRaw turns the typed `contents` of a gRPC request into
//     raw_input_contents.
//   - JSONError is the {"error": "..."} body of every failed HTTP call.
//
// Every error is a *tritonerr.Error with Triton's kind and, where Triton has
// one, Triton's exact message. Sizes claimed by the request are checked
// against what the body holds before anything is allocated from them.
package kserve
