package modelconfig

import (
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// NamesNoBackend reports whether a JSON configuration override names
// neither a backend nor a platform: Triton then completes it from the
// model's files, as it would a config.pbtxt that says as little.
func NamesNoBackend(override []byte) bool {
	var doc map[string]json.RawMessage
	if json.Unmarshal(override, &doc) != nil {
		return false // not an object: LoadJSON says what is wrong
	}
	for k := range doc {
		if fd := fieldOf(k); fd == "backend" || fd == "platform" {
			return false
		}
	}
	return true
}

// Overlay completes a JSON configuration override from base, the model's
// own configuration: the override's top-level fields (by proto or JSON
// name) replace base's, the fields it leaves out keep base's values. This
// is how a model of a built-in backend, which has no model file to complete
// an override from, gets what Triton's auto-completion would derive from
// one (inputs, outputs, the backend).
func Overlay(base *inference.ModelConfig, override []byte) ([]byte, error) {
	var over map[string]json.RawMessage
	if err := json.Unmarshal(override, &over); err != nil {
		return nil, tritonerr.InvalidArgf("failed to parse model configuration override: %v", err)
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(base)
	if err != nil {
		return nil, tritonerr.Internalf("cannot encode the model configuration: %v", err)
	}
	var merged map[string]json.RawMessage
	if err := json.Unmarshal(b, &merged); err != nil {
		return nil, tritonerr.Internalf("cannot encode the model configuration: %v", err)
	}
	for k, v := range over {
		name := fieldOf(k)
		if name == "" {
			name = k // unknown: LoadJSON names it
		}
		merged[name] = v
	}
	return json.Marshal(merged)
}

// fieldOf is the proto name of a ModelConfig field given by its proto or
// JSON name, "" for none.
func fieldOf(key string) string {
	fields := (&inference.ModelConfig{}).ProtoReflect().Descriptor().Fields()
	if fd := fields.ByName(protoreflect.Name(key)); fd != nil {
		return string(fd.Name())
	}
	if fd := fields.ByJSONName(key); fd != nil {
		return string(fd.Name())
	}
	return ""
}
