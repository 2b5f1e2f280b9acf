package modelconfig

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nereid-io/nereid/api/inference"
)

func TestOverlay(t *testing.T) {
	base := &inference.ModelConfig{Name: "simple", Backend: "addsub", MaxBatchSize: 8,
		Input: []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}}}}
	for _, c := range []struct {
		override     string
		noBackend    bool
		maxBatch     int32
		backend      string
		inputs       int
		wantParseErr bool
	}{
		// Triton's simple_http_model_control.py: the batch size alone, as a
		// string; the rest comes from the model.
		{`{"max_batch_size":"16"}`, true, 16, "addsub", 1, false},
		{`{"maxBatchSize":4}`, true, 4, "addsub", 1, false},
		// Zero is a value the override gives, not a field it leaves out.
		{`{"max_batch_size":0}`, true, 0, "addsub", 1, false},
		{`{"input":[]}`, true, 8, "addsub", 0, false},
		{`{"backend":"identity"}`, false, 8, "identity", 1, false},
		{`{"platform":"onnxruntime_onnx"}`, false, 8, "addsub", 1, false},
		{`"parameters": {"config": {{"max_batch_size": "16"}}}`, false, 0, "", 0, true},
	} {
		if got := NamesNoBackend([]byte(c.override)); got != c.noBackend {
			t.Errorf("NamesNoBackend(%s) = %v", c.override, got)
		}
		merged, err := Overlay(base, []byte(c.override))
		if c.wantParseErr {
			if err == nil {
				t.Errorf("Overlay(%s) accepted", c.override)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Overlay(%s): %v", c.override, err)
		}
		var cfg inference.ModelConfig
		if err := protojson.Unmarshal(merged, &cfg); err != nil {
			t.Fatalf("Overlay(%s) = %s: %v", c.override, merged, err)
		}
		if cfg.GetMaxBatchSize() != c.maxBatch || cfg.GetBackend() != c.backend || len(cfg.GetInput()) != c.inputs || cfg.GetName() != "simple" {
			t.Errorf("Overlay(%s) = %s", c.override, merged)
		}
	}
}
