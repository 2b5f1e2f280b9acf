package bus

import (
	"regexp"
	"testing"
)

func TestLoadedModelKey(t *testing.T) {
	// JetStream's rule for key-value keys.
	valid := regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)
	for _, name := range []string{"simple", "resnet50.onnx", "a b/c", "=~", "", "модель"} {
		key := LoadedModelKey(name)
		if !valid.MatchString(key) {
			t.Errorf("LoadedModelKey(%q) = %q: not a valid key", name, key)
		}
		back, err := ParseLoadedModelKey(key)
		if err != nil || back != name {
			t.Errorf("ParseLoadedModelKey(%q) = %q, %v; want %q", key, back, err, name)
		}
	}
	for _, bad := range []string{"a~2E", "=ZZ", "a.b"} {
		if _, err := ParseLoadedModelKey(bad); err == nil {
			t.Errorf("ParseLoadedModelKey(%q) accepted", bad)
		}
	}
}
