//go:build cgo

package cbackend

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFindInstalledSkipsTheModel: FindInstalled, the search for a model
// whose files arrived in a load request, takes the library from the backend
// directory even when the model's version and model directories hold one,
// and finds none when only those do.
func TestFindInstalledSkipsTheModel(t *testing.T) {
	dir := t.TempDir()
	model := t.TempDir()
	for _, d := range []string{filepath.Join(model, "1"), model} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "libtriton_up.so"), []byte("not opened"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := NewLoader(Config{Directory: dir})
	if f, ok := l.Find("up", model, 1); !ok || f.Location != filepath.Join(model, "1") {
		t.Fatalf("Find: %+v %v, want the version directory's", f, ok)
	}
	if f, ok := l.FindInstalled("up"); ok {
		t.Fatalf("FindInstalled found the model's own library: %+v", f)
	}
	installed := filepath.Join(dir, "up", "libtriton_up.so")
	if err := os.MkdirAll(filepath.Dir(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(installed, []byte("installed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, ok := l.FindInstalled("up"); !ok || f.Library != installed || f.Location != filepath.Join(dir, "up") {
		t.Fatalf("FindInstalled: %+v %v, want the backend directory's", f, ok)
	}
}
