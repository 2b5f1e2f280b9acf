// Package health holds the gRPC health checking service (package
// grpc.health.v1) as Triton serves it beside GRPCInferenceService, generated
// from health.proto.
//
// The protobuf names are the same as those of
// google.golang.org/grpc/health/grpc_health_v1, which is the point: clients
// that probe grpc.health.v1.Health work unchanged. The consequence is that a
// binary must not link both packages (for example through
// google.golang.org/grpc/health): protobuf-go reports the duplicate names as
// a registration conflict when the program starts.
package health
