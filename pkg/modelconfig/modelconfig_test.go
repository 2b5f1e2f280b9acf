package modelconfig

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestLoadBad loads each testdata/bad/NAME model and checks the error's kind
// and a substring of Triton's message.
func TestLoadBad(t *testing.T) {
	tests := []struct {
		dir  string
		kind tritonerr.Kind
		want string
	}{
		{"unknown_field", tritonerr.Internal, "failed to read text proto from testdata/bad/unknown_field/config.pbtxt: (line 2:1): unknown field: foo"},
		{"bad_enum", tritonerr.Internal, "bad_enum/config.pbtxt: (line 5:16): invalid value for enum type: TYPE_FOO"},
		{"bad_syntax", tritonerr.Internal, "failed to read text proto from testdata/bad/bad_syntax/config.pbtxt: "},
		{"mismatch", tritonerr.InvalidArg, "unexpected directory name 'mismatch' for model 'other', directory name must equal model name"},
		{"neg_mbs", tritonerr.InvalidArg, "'max_batch_size' must be non-negative value for neg_mbs"},
		{"dim_zero", tritonerr.InvalidArg, "model input 'INPUT0' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for dim_zero"},
		{"dim_minus2", tritonerr.InvalidArg, "model output 'OUTPUT0' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for dim_minus2"},
		{"no_dtype", tritonerr.InvalidArg, "model input 'INPUT0' must specify 'data_type' for no_dtype"},
		{"no_dims", tritonerr.InvalidArg, "model input 'INPUT0' must specify 'dims' for no_dims"},
		{"no_output_name", tritonerr.InvalidArg, "model output must specify 'name' for no_output_name"},
		{"reshape_size", tritonerr.InvalidArg, "model input 'INPUT0' has different size for dims and reshape for reshape_size"},
		{"reshape_vars", tritonerr.InvalidArg, "model input 'INPUT0' has different size for dims and reshape for reshape_vars"},
		{"reshape_nvars", tritonerr.InvalidArg, "has different number of variable-size dimensions for dims and reshape for reshape_nvars"},
		{"reshape_scalar", tritonerr.InvalidArg, "cannot have empty reshape for non-batching model as scalar tensors are not supported"},
		{"pref_too_big", tritonerr.InvalidArg, "dynamic batching preferred size must be <= max batch size for pref_too_big"},
		{"pref_zero", tritonerr.InvalidArg, "dynamic batching preferred size must be positive for pref_zero"},
		{"pref_nobatch", tritonerr.InvalidArg, "dynamic batching preferred size must be <= max batch size for pref_nobatch"},
		{"prio_default", tritonerr.InvalidArg, "default priority level must be in range [1, 2] for prio_default"},
		{"ctl_noname", tritonerr.InvalidArg, "sequence batching control tensor must have a name for ctl_noname"},
		{"ctl_nolist", tritonerr.InvalidArg, "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_START for ctl_nolist"},
		{"ctl_three", tritonerr.InvalidArg, "sequence batching control 'int32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_END for ctl_three"},
		{"ctl_fp32_one", tritonerr.InvalidArg, "sequence batching control 'fp32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_READY"},
		{"ctl_two_lists", tritonerr.InvalidArg, "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for CONTROL_SEQUENCE_START"},
		{"ctl_dup_tensor", tritonerr.InvalidArg, "sequence batching control tensor 'S' is specified for multiple control kinds for ctl_dup_tensor"},
		{"ctl_dup_kind", tritonerr.InvalidArg, "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for ctl_dup_kind"},
		{"corrid_type", tritonerr.InvalidArg, "unexpected data type for control CONTROL_SEQUENCE_CORRID for corrid_type. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"},
		{"corrid_notype", tritonerr.InvalidArg, "unexpected data type for control CONTROL_SEQUENCE_CORRID for corrid_notype"},
		{"corrid_list", tritonerr.InvalidArg, "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_CORRID"},
		{"iterative", tritonerr.Unsupported, "sequence batching with 'iterative_sequence' is not supported for iterative: requests released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE cannot be executed again"},
		{"slot_util", tritonerr.InvalidArg, "sequence batching minimum slot utilization must be in range (0.0, 1.0] for slot_util"},
		{"state_noout", tritonerr.InvalidArg, "sequence batching state 'IS' must specify 'output_name' for state_noout"},
		{"state_nodims", tritonerr.InvalidArg, "sequence batching state 'IS' must specify 'dims' for state_nodims"},
		{"state_init", tritonerr.InvalidArg, "initial_state setting expects state'IS' to have state_data set"},
		{"state_init_many", tritonerr.InvalidArg, "initial_state field for state input 'IS' must contain exactly one or zero element. Found '2' elements."},
		{"state_init_dtype", tritonerr.InvalidArg, "The data type used for 'initial_state' field of state 'IS' does not match the state data type."},
		{"state_init_noname", tritonerr.InvalidArg, "Field 'name' must be set when using initial_state for state input 'IS'."},
		{"state_init_dup", tritonerr.InvalidArg, "State input name 'IS' specified more than once."},
		{"state_init_ndims", tritonerr.InvalidArg, "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input 'IS'. 2 != 1"},
		{"state_init_vardims", tritonerr.InvalidArg, "'initial_state' field for state input name 'IS' contains variable dimensions."},
		{"state_init_dim", tritonerr.InvalidArg, "'initial_state' dim for input name 'IS' doesn't match 'state' dim description. 3 != 4"},
		{"state_growable", tritonerr.InvalidArg, "In order to 'use_growable_memory', you must also enable 'use_single_buffer' for state input name 'IS'."},
		{"state_growable_cpu", tritonerr.InvalidArg, "'use_growable_memory' can only work with KIND_GPU model instances right now. Please either change the instance type to KIND_GPU or set 'use_growable_memory' to false for state input 'IS'."},
		{"nobackend", tritonerr.InvalidArg, "Invalid model name: Could not determine backend for model 'nobackend' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'."},
		{"cpu_gpus", tritonerr.InvalidArg, "instance group cpu_gpus_0 of model cpu_gpus has kind KIND_CPU but specifies one or more GPUs"},
		// Without GPUs Triton turns KIND_AUTO into KIND_CPU, and then the GPUs
		// it lists are an error.
		{"auto_gpus", tritonerr.InvalidArg, "instance group auto_gpus_0 of model auto_gpus has kind KIND_CPU but specifies one or more GPUs"},
		{"profile", tritonerr.InvalidArg, "specifies profile field which is only supported for TensorRT models"},
		{"pair", tritonerr.InvalidArg, "unexpected 'platform' and 'backend' pair, got:tensorrt_plan, onnxruntime"},
		{"shape_tensor", tritonerr.InvalidArg, "shape tensors are only supported for TensorRT platform for shape_tensor"},
		{"nchw", tritonerr.InvalidArg, "model input NHWC/NCHW require 3 dims for nchw"},
		{"batch_input", tritonerr.InvalidArg, "unknown source input name 'NOPE' for batch_input"},
		{"ensemble_nosched", tritonerr.InvalidArg, "ensemble scheduling must be set for ensemble ensemble_nosched whose platform is ensemble"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		seen[tt.dir] = true
		t.Run(tt.dir, func(t *testing.T) {
			cfg, err := Load(filepath.Join("testdata", "bad", tt.dir))
			if err == nil {
				t.Fatalf("Load succeeded: %v", cfg)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\n does not contain %q", err, tt.want)
			}
			if k := tritonerr.KindOf(err); k != tt.kind {
				t.Errorf("kind %v, want %v", k, tt.kind)
			}
		})
	}
	// Every fixture must be covered by the table.
	ents, err := os.ReadDir(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !seen[e.Name()] {
			t.Errorf("testdata/bad/%s has no test case", e.Name())
		}
	}
}

func load(t *testing.T, dir string) *inference.ModelConfig {
	t.Helper()
	cfg, err := Load(filepath.Join("testdata", "good", dir))
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	return cfg
}

// TestSimpleJSON checks Triton's example model against the JSON Triton
// serves for it on a machine without GPUs (golden file, compared both byte
// for byte and after parsing).
func TestSimpleJSON(t *testing.T) {
	got, err := JSON(load(t, "simple"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "simple.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON differs:\n got %s\nwant %s", got, bytes.TrimSpace(want))
	}
	if !bytes.Equal(got, bytes.TrimSpace(want)) {
		t.Errorf("JSON field order or spacing differs:\n got %s\nwant %s", got, bytes.TrimSpace(want))
	}
}

func TestDefaults(t *testing.T) {
	t.Run("name from directory", func(t *testing.T) {
		if cfg := load(t, "noname"); cfg.Name != "noname" {
			t.Errorf("name %q", cfg.Name)
		}
	})
	t.Run("version policy and pinned memory", func(t *testing.T) {
		cfg := load(t, "noname")
		if n := cfg.GetVersionPolicy().GetLatest().GetNumVersions(); n != 1 {
			t.Errorf("latest num_versions %d, want 1", n)
		}
		if !cfg.GetOptimization().GetInputPinnedMemory().GetEnable() || !cfg.GetOptimization().GetOutputPinnedMemory().GetEnable() {
			t.Error("pinned memory not enabled")
		}
	})
	t.Run("single default group", func(t *testing.T) {
		cfg := load(t, "noname")
		want := []*inference.ModelInstanceGroup{{Name: "noname", Kind: inference.ModelInstanceGroup_KIND_CPU, Count: 1}}
		if !protoSliceEqual(cfg.InstanceGroup, want) {
			t.Errorf("groups %v", cfg.InstanceGroup)
		}
	})
	t.Run("tensorflow CPU groups get two instances", func(t *testing.T) {
		cfg := load(t, "simple")
		if cfg.Backend != "tensorflow" || cfg.DefaultModelFilename != "model.graphdef" {
			t.Errorf("backend %q file %q", cfg.Backend, cfg.DefaultModelFilename)
		}
		if g := cfg.InstanceGroup; len(g) != 1 || g[0].Count != 2 || g[0].Kind != inference.ModelInstanceGroup_KIND_CPU {
			t.Errorf("groups %v", g)
		}
	})
	t.Run("explicit groups", func(t *testing.T) {
		cfg := load(t, "groups")
		want := []*inference.ModelInstanceGroup{
			{Name: "groups_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Count: 3},
			{Name: "gpu_group", Kind: inference.ModelInstanceGroup_KIND_GPU, Count: 1},
			{Name: "groups_2", Kind: inference.ModelInstanceGroup_KIND_CPU, Count: 1},
			{Name: "groups_3", Kind: inference.ModelInstanceGroup_KIND_MODEL, Count: 1},
		}
		if !protoSliceEqual(cfg.InstanceGroup, want) {
			t.Errorf("groups %v", cfg.InstanceGroup)
		}
	})
	t.Run("dynamic batching preferred size", func(t *testing.T) {
		db := load(t, "dyna").GetDynamicBatching()
		if !reflect.DeepEqual(db.GetPreferredBatchSize(), []int32{8}) || db.GetMaxQueueDelayMicroseconds() != 100 {
			t.Errorf("dynamic_batching %v", db)
		}
	})
	t.Run("sequence batching", func(t *testing.T) {
		cfg := load(t, "seq")
		sb := cfg.GetSequenceBatching()
		if sb.MaxSequenceIdleMicroseconds != DefaultMaxSequenceIdleMicroseconds || MaxSequenceIdleMicroseconds(cfg) != 1000000 {
			t.Errorf("idle %d", sb.MaxSequenceIdleMicroseconds)
		}
		if !reflect.DeepEqual(sb.GetOldest().GetPreferredBatchSize(), []int32{4}) {
			t.Errorf("oldest %v", sb.GetOldest())
		}
		for kind, want := range map[inference.ModelSequenceBatching_Control_Kind]struct {
			input string
			dt    inference.DataType
		}{
			inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START: {"START", inference.DataType_TYPE_FP32},
			inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY: {"READY", inference.DataType_TYPE_BOOL},
			inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:   {"END", inference.DataType_TYPE_INT32},
		} {
			c, err := BooleanControl(sb, cfg.Name, kind)
			if err != nil || c == nil || c.Input != want.input || c.DataType != want.dt {
				t.Errorf("%v: %+v, %v", kind, c, err)
			}
		}
		c, err := CorrIDControl(sb, cfg.Name)
		if err != nil || c == nil || c.Input != "CORRID" || c.DataType != inference.DataType_TYPE_UINT64 {
			t.Errorf("CORRID: %+v, %v", c, err)
		}
	})
	t.Run("reshape with variable dims", func(t *testing.T) {
		load(t, "reshape")
	})
	t.Run("no config, backend from model.<backend> name", func(t *testing.T) {
		cfg := load(t, "model.identity")
		if cfg.Backend != "identity" || cfg.DefaultModelFilename != "model.identity" || cfg.Name != "model.identity" {
			t.Errorf("got name %q backend %q file %q", cfg.Name, cfg.Backend, cfg.DefaultModelFilename)
		}
	})
}

func protoSliceEqual[M proto.Message](a, b []M) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestNormalizeIdempotent(t *testing.T) {
	for _, dir := range []string{"simple", "dyna", "seq", "groups", "reshape"} {
		cfg := load(t, dir)
		again := proto.Clone(cfg).(*inference.ModelConfig)
		Normalize(again)
		if !proto.Equal(cfg, again) {
			t.Errorf("%s: Normalize changed a normalized config", dir)
		}
		if err := Validate(again); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

// TestJSONRoundTrip checks that the JSON is what protobuf's own JSON parser
// (which Triton uses to read configs given over the load API) reads back to
// the same config.
func TestJSONRoundTrip(t *testing.T) {
	for _, dir := range []string{"simple", "dyna", "seq", "groups", "reshape"} {
		cfg := load(t, dir)
		b, _ := JSON(cfg)
		var back inference.ModelConfig
		if err := protojson.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v\n%s", dir, err, b)
		}
		if !proto.Equal(cfg, &back) {
			t.Errorf("%s: round trip differs", dir)
		}
	}
}

func TestJSONValues(t *testing.T) {
	cfg := &inference.ModelConfig{
		Name: "a<b>&\"c\"\n\x01\xff",
		Input: []*inference.ModelInput{{
			Name: "x", DataType: inference.DataType(99), Dims: []int64{-1, 1 << 40},
		}},
		SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{
			MaxQueueDelayMicroseconds: 1<<64 - 1,
			PriorityQueuePolicy: map[uint64]*inference.ModelQueuePolicy{
				10: {DefaultTimeoutMicroseconds: 5},
				2:  {TimeoutAction: inference.ModelQueuePolicy_DELAY},
			},
		}},
		InstanceGroup: []*inference.ModelInstanceGroup{{
			SecondaryDevices: []*inference.ModelInstanceGroup_SecondaryDevice{{DeviceId: 7}},
		}},
		Parameters: map[string]*inference.ModelParameter{"b": {StringValue: "2"}, "a": {StringValue: "1"}},
	}
	b, err := JSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		`"name":"a<b>&\"c\"\n\u0001` + "\ufffd" + `"`,
		`"data_type":99`,
		`"dims":[-1,1099511627776]`,
		`"max_queue_delay_microseconds":18446744073709551615`,
		`"priority_queue_policy":{"2":{"timeout_action":"DELAY","default_timeout_microseconds":0,`,
		`},"10":{"timeout_action":"REJECT","default_timeout_microseconds":5,`,
		`"secondary_devices":[{"kind":"KIND_NVDLA","device_id":7}]`,
		`"parameters":{"a":{"string_value":"1"},"b":{"string_value":"2"}}`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s\n%s", want, s)
		}
	}
	if !json.Valid(b) {
		t.Errorf("invalid JSON: %s", b)
	}
	if strings.Contains(s, "version_policy") || strings.Contains(s, "optimization") {
		t.Errorf("unset messages printed: %s", s)
	}
}

func TestHelpers(t *testing.T) {
	cfg := load(t, "simple")
	if in := InputByName(cfg, "INPUT1"); in == nil || in.Name != "INPUT1" {
		t.Errorf("InputByName: %v", in)
	}
	if InputByName(cfg, "OUTPUT0") != nil || OutputByName(cfg, "INPUT0") != nil {
		t.Error("found a tensor on the wrong side")
	}
	if out := OutputByName(cfg, "OUTPUT1"); out == nil {
		t.Error("OutputByName: nil")
	}
	if got := FullShape(cfg, []int64{16}); !reflect.DeepEqual(got, []int64{-1, 16}) {
		t.Errorf("FullShape batching: %v", got)
	}
	dims := []int64{2, 3}
	got := FullShape(&inference.ModelConfig{}, dims)
	got[0] = 9
	if !reflect.DeepEqual(dims, []int64{2, 3}) || !reflect.DeepEqual(got, []int64{9, 3}) {
		t.Error("FullShape must return a copy")
	}
	if MaxSequenceIdleMicroseconds(cfg) != 0 || IsDecoupled(cfg) {
		t.Error("simple has no sequence batcher and is not decoupled")
	}
}

func TestParse(t *testing.T) {
	cfg, err := Parse("x/config.pbtxt", []byte(`name: "m" max_batch_size: 4 input [{ name: "I" data_type: TYPE_FP16 dims: [-1] }]`))
	if err != nil || cfg.Name != "m" || cfg.MaxBatchSize != 4 || cfg.Input[0].DataType != inference.DataType_TYPE_FP16 {
		t.Fatalf("Parse: %v, %v", cfg, err)
	}
	_, err = Parse("x/config.pbtxt", []byte("max_batch_size: 99999999999"))
	if err == nil || !strings.Contains(err.Error(), "failed to read text proto from x/config.pbtxt: (line 1:17): invalid value for int32 type: 99999999999") {
		t.Errorf("overflow: %v", err)
	}
}
