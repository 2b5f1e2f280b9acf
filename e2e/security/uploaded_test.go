package security

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// markerSource is the executor tests' Triton backend whose library, once
// opened, writes the id of the process that opened it to MARKER from its
// constructor.
const markerSource = "services/executor/testdata/marker/marker.c"

// buildMarker compiles markerSource, writing to marker.
func buildMarker(t *testing.T, marker string) []byte {
	t.Helper()
	dir := t.TempDir()
	src, out := constellation.RepoPath(t, markerSource), filepath.Join(dir, "libtriton_marker.so")
	if b, err := exec.Command("cc", "-Wall", "-Werror", "-shared", "-fPIC", "-DMARKER="+strconv.Quote(marker), "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, b)
	}
	lib, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// uploadingConstellation starts nats-server, an executor in explicit mode
// over an empty repository and an empty backend directory (with extra
// flags) and a gateway, and waits until the gateway sees the executor.
func uploadingConstellation(t *testing.T, extra ...string) (*constellation.Gateway, *constellation.Proc) {
	t.Helper()
	c := constellation.NewCluster(t)
	probe := constellation.Addr(constellation.FreePort(t))
	ex := c.Executor(t.TempDir(), "ex-upload", append([]string{"--model-control-mode", "explicit", "--probe-addr", probe,
		"--backend-directory", t.TempDir()}, extra...)...)
	if err := constellation.WaitHTTP("http://"+probe+"/readyz", 200, 20*time.Second); err != nil {
		t.Fatalf("executor: %v\n%s", err, ex.Output())
	}
	g := c.Gateway()
	if err := constellation.WaitHTTP(g.HTTP()+"/v2/health/ready", 200, 20*time.Second); err != nil {
		t.Fatalf("gateway: %v\n%s\n%s", err, g.Output(), ex.Output())
	}
	return g, ex
}

// loadUploaded posts a repository load of model "uploaded" with the
// configuration naming backend be and the given files.
func loadUploaded(t *testing.T, g *constellation.Gateway, be string, files map[string][]byte) (int, string) {
	t.Helper()
	params := map[string]string{"config": `{"backend":"` + be + `","max_batch_size":0,` +
		`"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[1]}],"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[1]}]}`}
	for p, data := range files {
		params["file:"+p] = base64.StdEncoding.EncodeToString(data)
	}
	body, err := json.Marshal(map[string]any{"parameters": params})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(g.HTTP()+"/v2/repository/models/uploaded/load", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUploadedCodeNotRun: a repository load over HTTP whose files carry a
// backend library (file:1/libtriton_marker.so with backend "marker", as
// Triton would open it from the model's version directory) or a Python
// backend's model.py is refused with 400, naming the file and
// --allow-uploaded-code; the library's constructor never runs in the
// executor. An executor started with --allow-uploaded-code true opens it,
// as Triton does.
func TestUploadedCodeNotRun(t *testing.T) {
	t.Run("refused by default", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "constructor-ran")
		lib := buildMarker(t, marker)
		g, ex := uploadingConstellation(t)
		for _, tc := range []struct {
			backend, file string
			data          []byte
		}{
			{"marker", "1/libtriton_marker.so", lib},
			{"python", "1/model.py", []byte("import os\nos.system('id')\n")},
		} {
			code, body := loadUploaded(t, g, tc.backend, map[string][]byte{tc.file: tc.data})
			if code != http.StatusBadRequest || !strings.Contains(body, "'file:"+tc.file+"'") || !strings.Contains(body, "--allow-uploaded-code=true") {
				t.Fatalf("load with %s: %d %s, want 400 naming the file and --allow-uploaded-code\n%s", tc.file, code, body, ex.Output())
			}
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("the uploaded library's constructor ran (marker: %v)\n%s", err, ex.Output())
		}
		if ex.Exited() {
			t.Fatalf("the executor exited:\n%s", ex.Output())
		}
	})

	t.Run("allowed by the flag", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "constructor-ran")
		lib := buildMarker(t, marker)
		g, ex := uploadingConstellation(t, "--allow-uploaded-code", "true")
		if code, body := loadUploaded(t, g, "marker", map[string][]byte{"1/libtriton_marker.so": lib}); code != http.StatusOK {
			t.Fatalf("load: %d %s\n%s", code, body, ex.Output())
		}
		b, err := os.ReadFile(marker)
		if err != nil {
			t.Fatalf("the uploaded library was not opened: %v\n%s", err, ex.Output())
		}
		if string(b) != strconv.Itoa(ex.Pid()) {
			t.Fatalf("the constructor ran in process %s, want the executor's %d", b, ex.Pid())
		}
	})
}
