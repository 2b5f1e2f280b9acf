package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/cbackend"
)

// markerSource is a Triton backend (C) whose library, once opened, writes
// the process id to MARKER from its constructor: the proof that a load ran
// code into the process.
const markerSource = "testdata/marker/marker.c"

// uploadConfig is the configuration of a load naming backend be.
func uploadConfig(be string) string {
	return `{"backend":"` + be + `","max_batch_size":0,"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[1]}],"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[1]}]}`
}

// buildMarkerBackend compiles markerSource writing to marker, and the
// stub libtritonserver.so the executor opens before any backend.
func buildMarkerBackend(t *testing.T, marker string) (lib []byte, stub string) {
	t.Helper()
	if !cbackend.Available {
		t.Skip("C backends need cgo")
	}
	_, file, _, _ := runtime.Caller(0)
	cb := filepath.Join(filepath.Dir(file), "internal", "cbackend")
	dir := t.TempDir()
	stub = filepath.Join(dir, "libtritonserver.so")
	src := filepath.Join(filepath.Dir(file), markerSource)
	out := filepath.Join(dir, "libtriton_marker.so")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-Wl,-soname,libtritonserver.so", "-o", stub, filepath.Join(cb, "stub", "tritonserver_stub.c")},
		{"-Wall", "-Werror", "-shared", "-fPIC", "-DMARKER=" + strconv.Quote(marker), "-o", out, src},
	} {
		if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, b)
		}
	}
	lib, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return lib, stub
}

// startExplicit runs an executor in explicit mode over an empty
// repository, with an empty backend directory, and returns a bus client.
func startExplicit(t *testing.T, stub string, allow bool) *bus.Conn {
	t.Helper()
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	runExecutor(t, url, Config{RepositoryPath: t.TempDir(), ControlMode: ControlExplicit, ID: "ex-1", Node: "node-a",
		BackendDirectory: t.TempDir(), ServerLibrary: stub, AllowUploadedCode: allow})
	return client
}

func loadFiles(t *testing.T, client *bus.Conn, name, config string, files map[string][]byte) *busv1.ModelControlReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply := &busv1.ModelControlReply{}
	if err := client.Request(ctx, bus.ModelControlSubject, &busv1.ModelControlRequest{Name: name, Load: true, Config: config, Files: files}, reply); err != nil {
		t.Fatal(err)
	}
	return reply
}

// TestUploadedCodeRefused: by default a repository load whose files carry
// code (a backend library the C bridge would open from the model's version
// directory, a library no backend names, an ELF file under another name, a
// Python backend's model.py) is refused as an invalid argument naming the
// file and the flag, and the uploaded library's constructor never runs.
func TestUploadedCodeRefused(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "constructor-ran")
	lib, stub := buildMarkerBackend(t, marker)
	client := startExplicit(t, stub, false)

	for _, tc := range []struct {
		name, backend, file string
		data                []byte
	}{
		{"backend library", "marker", "1/libtriton_marker.so", lib},
		{"library in the model directory", "marker", "libtriton_marker.so", lib},
		{"library no backend names", "identity", "1/libhelper.so.1", lib},
		{"ELF file under another name", "identity", "1/model.plan", lib},
		{"python model.py", "python", "1/model.py", []byte("import os\nos.system('touch /tmp/pwned')\n")},
		{"python module", "identity", "1/helper.py", []byte("print('hello')\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := loadFiles(t, client, "uploaded", uploadConfig(tc.backend), map[string][]byte{tc.file: tc.data})
			if tritonerr.ParseKind(rep.GetErrorKind()) != tritonerr.InvalidArg {
				t.Fatalf("load answered %q %q, want an invalid argument", rep.GetErrorKind(), rep.GetError())
			}
			for _, want := range []string{"failed to load 'uploaded'", "'file:" + tc.file + "'", "--allow-uploaded-code=true"} {
				if !strings.Contains(rep.GetError(), want) {
					t.Errorf("error %q does not say %q", rep.GetError(), want)
				}
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Fatalf("the uploaded library's constructor ran (marker: %v)", err)
			}
			for _, m := range rep.GetCatalog().GetModels() {
				if m.GetName() == "uploaded" && m.GetState() == StateReady {
					t.Fatalf("the refused model is listed READY")
				}
			}
		})
	}

	t.Run("execution environment among the files", func(t *testing.T) {
		cfg := strings.Replace(uploadConfig("python"), `"backend"`,
			`"parameters":{"EXECUTION_ENV_PATH":{"string_value":"$$TRITON_MODEL_DIRECTORY/env.tar.gz"}},"backend"`, 1)
		rep := loadFiles(t, client, "uploaded", cfg, map[string][]byte{"env.tar.gz": []byte("packed environment")})
		if tritonerr.ParseKind(rep.GetErrorKind()) != tritonerr.InvalidArg || !strings.Contains(rep.GetError(), "EXECUTION_ENV_PATH") ||
			!strings.Contains(rep.GetError(), "--allow-uploaded-code=true") {
			t.Fatalf("load answered %q %q", rep.GetErrorKind(), rep.GetError())
		}
	})

	t.Run("data files still load", func(t *testing.T) {
		rep := loadFiles(t, client, "data", uploadConfig("identity"), map[string][]byte{"1/weights.bin": []byte("weights"), "labels.txt": []byte("a\n")})
		if rep.GetError() != "" {
			t.Fatalf("a load with data files failed: %s", rep.GetError())
		}
	})
}

// TestUploadedCodeAllowed: with --allow-uploaded-code the load behaves as
// Triton's: the library uploaded into the version directory is the
// model's backend, opened into this process.
func TestUploadedCodeAllowed(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "constructor-ran")
	lib, stub := buildMarkerBackend(t, marker)
	client := startExplicit(t, stub, true)
	rep := loadFiles(t, client, "uploaded", uploadConfig("allowedmarker"), map[string][]byte{"1/libtriton_allowedmarker.so": lib})
	if rep.GetError() != "" {
		t.Fatalf("load failed: %s %s", rep.GetErrorKind(), rep.GetError())
	}
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the uploaded library was not opened: %v", err)
	}
	if string(b) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("marker %q, want this process's id %d", b, os.Getpid())
	}
}
