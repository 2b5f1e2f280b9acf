package inference_test

import (
	"testing"

	health "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
)

// TestFieldNumbers pins field names, numbers and kinds that Triton clients
// depend on, so an accidental edit of a .proto fails here rather than on the
// wire.
func TestFieldNumbers(t *testing.T) {
	tests := []struct {
		msg    proto.Message
		field  protoreflect.Name
		number protoreflect.FieldNumber
		kind   protoreflect.Kind
	}{
		{&inference.ModelInferRequest{}, "model_name", 1, protoreflect.StringKind},
		{&inference.ModelInferRequest{}, "model_version", 2, protoreflect.StringKind},
		{&inference.ModelInferRequest{}, "id", 3, protoreflect.StringKind},
		{&inference.ModelInferRequest{}, "parameters", 4, protoreflect.MessageKind},
		{&inference.ModelInferRequest{}, "inputs", 5, protoreflect.MessageKind},
		{&inference.ModelInferRequest{}, "outputs", 6, protoreflect.MessageKind},
		{&inference.ModelInferRequest{}, "raw_input_contents", 7, protoreflect.BytesKind},
		{&inference.ModelInferRequest_InferInputTensor{}, "contents", 5, protoreflect.MessageKind},
		{&inference.ModelInferResponse{}, "raw_output_contents", 6, protoreflect.BytesKind},
		{&inference.ModelStreamInferResponse{}, "error_message", 1, protoreflect.StringKind},
		{&inference.ModelStreamInferResponse{}, "infer_response", 2, protoreflect.MessageKind},
		{&inference.InferParameter{}, "bool_param", 1, protoreflect.BoolKind},
		{&inference.InferParameter{}, "int64_param", 2, protoreflect.Int64Kind},
		{&inference.InferParameter{}, "string_param", 3, protoreflect.StringKind},
		{&inference.InferParameter{}, "double_param", 4, protoreflect.DoubleKind},
		{&inference.InferParameter{}, "uint64_param", 5, protoreflect.Uint64Kind},
		{&inference.InferTensorContents{}, "bool_contents", 1, protoreflect.BoolKind},
		{&inference.InferTensorContents{}, "int_contents", 2, protoreflect.Int32Kind},
		{&inference.InferTensorContents{}, "int64_contents", 3, protoreflect.Int64Kind},
		{&inference.InferTensorContents{}, "uint_contents", 4, protoreflect.Uint32Kind},
		{&inference.InferTensorContents{}, "uint64_contents", 5, protoreflect.Uint64Kind},
		{&inference.InferTensorContents{}, "fp32_contents", 6, protoreflect.FloatKind},
		{&inference.InferTensorContents{}, "fp64_contents", 7, protoreflect.DoubleKind},
		{&inference.InferTensorContents{}, "bytes_contents", 8, protoreflect.BytesKind},
		{&inference.ModelStatistics{}, "batch_stats", 7, protoreflect.MessageKind},
		{&inference.ModelStatistics{}, "response_stats", 9, protoreflect.MessageKind},
		{&inference.StatisticDuration{}, "ns", 2, protoreflect.Uint64Kind},
		{&inference.CudaSharedMemoryRegisterRequest{}, "raw_handle", 2, protoreflect.BytesKind},
		{&inference.CudaSharedMemoryRegisterRequest{}, "device_id", 3, protoreflect.Int64Kind},
		{&inference.SystemSharedMemoryRegisterRequest{}, "offset", 3, protoreflect.Uint64Kind},
		{&inference.ModelConfig{}, "name", 1, protoreflect.StringKind},
		{&inference.ModelConfig{}, "platform", 2, protoreflect.StringKind},
		{&inference.ModelConfig{}, "version_policy", 3, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "max_batch_size", 4, protoreflect.Int32Kind},
		{&inference.ModelConfig{}, "input", 5, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "output", 6, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "instance_group", 7, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "dynamic_batching", 11, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "optimization", 12, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "sequence_batching", 13, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "parameters", 14, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "ensemble_scheduling", 15, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "backend", 17, protoreflect.StringKind},
		{&inference.ModelConfig{}, "model_transaction_policy", 19, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "batch_input", 20, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "response_cache", 24, protoreflect.MessageKind},
		{&inference.ModelConfig{}, "runtime", 25, protoreflect.StringKind},
		{&inference.ModelConfig{}, "model_metrics", 26, protoreflect.MessageKind},
		{&inference.ModelInput{}, "dims", 4, protoreflect.Int64Kind},
		{&inference.ModelInput{}, "reshape", 5, protoreflect.MessageKind},
		{&inference.ModelInput{}, "optional", 8, protoreflect.BoolKind},
		{&inference.ModelInput{}, "is_non_linear_format_io", 9, protoreflect.BoolKind},
		{&inference.ModelOutput{}, "reshape", 5, protoreflect.MessageKind},
		{&inference.ModelOutput{}, "label_filename", 4, protoreflect.StringKind},
		{&inference.ModelOutput{}, "is_non_linear_format_io", 7, protoreflect.BoolKind},
		{&inference.ModelInstanceGroup{}, "kind", 4, protoreflect.EnumKind},
		{&inference.ModelInstanceGroup{}, "count", 2, protoreflect.Int32Kind},
		{&inference.ModelInstanceGroup{}, "gpus", 3, protoreflect.Int32Kind},
		{&inference.ModelDynamicBatching{}, "max_queue_delay_microseconds", 2, protoreflect.Uint64Kind},
		{&inference.ModelDynamicBatching{}, "priority_levels", 4, protoreflect.Uint64Kind},
		{&inference.ModelSequenceBatching{}, "max_sequence_idle_microseconds", 1, protoreflect.Uint64Kind},
		{&inference.ModelSequenceBatching{}, "direct", 3, protoreflect.MessageKind},
		{&inference.ModelSequenceBatching{}, "oldest", 4, protoreflect.MessageKind},
		{&inference.ModelSequenceBatching{}, "state", 5, protoreflect.MessageKind},
		{&inference.ModelSequenceBatching_Control{}, "bool_false_true", 5, protoreflect.BoolKind},
		{&inference.ModelSequenceBatching_Control{}, "data_type", 4, protoreflect.EnumKind},
		{&inference.ModelSequenceBatching_State{}, "initial_state", 5, protoreflect.MessageKind},
		{&busv1.ModelVersionState{}, "config", 5, protoreflect.MessageKind},
		{&busv1.ExecutorHeartbeat{}, "withdraw", 4, protoreflect.BoolKind},
		{&health.HealthCheckResponse{}, "status", 1, protoreflect.EnumKind},
	}
	for _, tt := range tests {
		md := tt.msg.ProtoReflect().Descriptor()
		t.Run(string(md.FullName())+"."+string(tt.field), func(t *testing.T) {
			fd := md.Fields().ByName(tt.field)
			if fd == nil {
				t.Fatalf("no field %q", tt.field)
			}
			if fd.Number() != tt.number || fd.Kind() != tt.kind {
				t.Errorf("field %q = #%d %v, want #%d %v", tt.field, fd.Number(), fd.Kind(), tt.number, tt.kind)
			}
		})
	}
}

// TestEnumNumbers pins enum values that appear in config.pbtxt files and in
// Triton's model-config JSON.
func TestEnumNumbers(t *testing.T) {
	tests := []struct {
		got  protoreflect.Enum
		name protoreflect.Name
		want protoreflect.EnumNumber
	}{
		{inference.DataType_TYPE_INVALID, "TYPE_INVALID", 0},
		{inference.DataType_TYPE_BOOL, "TYPE_BOOL", 1},
		{inference.DataType_TYPE_INT32, "TYPE_INT32", 8},
		{inference.DataType_TYPE_STRING, "TYPE_STRING", 13},
		{inference.DataType_TYPE_BF16, "TYPE_BF16", 14},
		{inference.ModelInstanceGroup_KIND_AUTO, "KIND_AUTO", 0},
		{inference.ModelInstanceGroup_KIND_CPU, "KIND_CPU", 2},
		{inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID, "CONTROL_SEQUENCE_CORRID", 3},
		{inference.BatchInput_BATCH_ITEM_SHAPE_FLATTEN, "BATCH_ITEM_SHAPE_FLATTEN", 5},
		{health.HealthCheckResponse_SERVICE_UNKNOWN, "SERVICE_UNKNOWN", 3},
	}
	for _, tt := range tests {
		d := tt.got.Descriptor().Values().ByNumber(tt.got.Number())
		if d == nil || d.Name() != tt.name || tt.got.Number() != tt.want {
			t.Errorf("%v: got #%d, want %s = %d", tt.got, tt.got.Number(), tt.name, tt.want)
		}
	}
}

// TestServiceMethods pins the full method names Triton's clients call.
func TestServiceMethods(t *testing.T) {
	want := []string{
		"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
		"ModelInfer", "ModelStreamInfer", "ModelConfig", "ModelStatistics",
		"RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",
		"SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister",
		"CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister",
		"TraceSetting", "LogSettings",
	}
	sd := inference.File_inference_grpc_service_proto.Services().ByName("GRPCInferenceService")
	if sd == nil || sd.FullName() != "inference.GRPCInferenceService" {
		t.Fatal("service inference.GRPCInferenceService missing")
	}
	if sd.Methods().Len() != len(want) {
		t.Errorf("service has %d methods, want %d", sd.Methods().Len(), len(want))
	}
	for _, m := range want {
		if sd.Methods().ByName(protoreflect.Name(m)) == nil {
			t.Errorf("method %s missing", m)
		}
	}
	stream := sd.Methods().ByName("ModelStreamInfer")
	if stream == nil || !stream.IsStreamingClient() || !stream.IsStreamingServer() {
		t.Error("ModelStreamInfer must be bidirectional streaming")
	}
	if inference.GRPCInferenceService_ModelInfer_FullMethodName != "/inference.GRPCInferenceService/ModelInfer" {
		t.Errorf("ModelInfer full method = %q", inference.GRPCInferenceService_ModelInfer_FullMethodName)
	}
}
