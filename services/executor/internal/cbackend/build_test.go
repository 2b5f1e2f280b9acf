//go:build cgo

package cbackend

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// testBackends are the C test backends under testdata/backends, by the
// backend name they are installed as.
var testBackends = map[string]string{
	"nidentity":     "identity.c",
	"nautocomplete": "autocomplete.c",
	"nfail":         "failinit.c",
	"ndecoupled":    "decoupled.c",
	"nstate":        "state.c",
	"nthreads":      "threads.c",
	"nbls":          "bls.c",
	"ngpu":          "gpu.c",
	"nownership":    "ownership.c",
}

// buildBackends compiles the stub libtritonserver.so and the test backends
// with the system C compiler against this package's headers, laid out as
// Triton's backend directory; it returns that directory and the stub.
//
// With NEREID_TEST_BACKENDS set, they are built there once and reused: a
// benchmark run under valgrind then starts no compiler (callgrind aborts
// on the SIGCHLD of a child process).
func buildBackends(t testing.TB) (dir, stub string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Dir(file)
	root := os.Getenv("NEREID_TEST_BACKENDS")
	if root != "" {
		stub = filepath.Join(root, "lib", "libtritonserver.so")
		dir = filepath.Join(root, "backends")
		if _, err := os.Stat(filepath.Join(root, "built")); err == nil {
			return dir, stub
		}
	} else {
		root = t.TempDir()
	}
	stub = filepath.Join(root, "lib", "libtritonserver.so")
	cc(t, src, stub, filepath.Join(src, "stub", "tritonserver_stub.c"), "-Wl,-soname,libtritonserver.so")
	dir = filepath.Join(root, "backends")
	for name, c := range testBackends {
		cc(t, src, filepath.Join(dir, name, "libtriton_"+name+".so"), filepath.Join(src, "testdata", "backends", c),
			"-L"+filepath.Dir(stub), "-ltritonserver", "-lpthread")
	}
	if os.Getenv("NEREID_TEST_BACKENDS") != "" {
		if err := os.WriteFile(filepath.Join(root, "built"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, stub
}

func cc(t testing.TB, src, out, file string, extra ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-Wall", "-Werror", "-shared", "-fPIC", "-I" + filepath.Join(src, "include"), "-o", out, file}, extra...)
	if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", file, err, b)
	}
}
