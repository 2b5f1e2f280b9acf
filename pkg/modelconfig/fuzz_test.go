package modelconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// FuzzParse feeds arbitrary config.pbtxt text through the whole pipeline a
// repository scan runs: parse, normalize, validate, JSON. None of it may
// panic, and JSON must be valid and read back to the same config.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*", "*", FileName))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`name: "m" backend: "b" max_batch_size: 2 input [{ name: "i" data_type: TYPE_INT8 dims: [-1, 3] reshape { shape: [3, -1] } }]`))
	f.Add([]byte(`dynamic_batching { priority_levels: 3 default_priority_level: 1 priority_queue_policy [{ key: 2 value: { max_queue_size: 1 } }] }`))
	f.Add([]byte(`sequence_batching { direct { minimum_slot_utilization: nan } }`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz/config.pbtxt", data)
		if err != nil {
			return
		}
		if cfg.Name == "" {
			cfg.Name = "fuzz"
		}
		Normalize(cfg)
		_ = Validate(cfg)
		b, err := JSON(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Fatalf("invalid JSON %s", b)
		}
		var back inference.ModelConfig
		if err := protojson.Unmarshal(b, &back); err != nil {
			t.Fatalf("JSON does not read back: %v\n%s", err, b)
		}
		// Compare as JSON: proto.Equal treats NaN as unequal to itself.
		b2, _ := JSON(&back)
		if string(b) != string(b2) {
			t.Fatalf("round trip differs\n%s\n%s", b, b2)
		}
		_ = proto.Size(cfg)
	})
}
