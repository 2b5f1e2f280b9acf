// Package inference holds the Go types of Triton's KServe v2 gRPC protocol
// (grpc_service.proto) and of its model configuration schema
// (model_config.proto), generated from the .proto files beside this file.
//
// The package, service, message and field names and the field numbers are
// Triton's, so any Triton client (tritonclient, perf_analyzer, Triton's own
// generated stubs) talks to a server built on these types unchanged. The
// same messages travel on Nereid's bus: executors receive ModelInferRequest
// and answer ModelInferResponse, with all tensor data in the raw_*_contents
// fields.
//
// Regenerate with `make proto` (bash api/gen.sh); never edit the *.pb.go
// files by hand. wire_test.go pins the field numbers clients depend on.
package inference
