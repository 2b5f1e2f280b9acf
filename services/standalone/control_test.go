package standalone

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/services/executor"
)

// slowSeqConfig is a sequence model (identity backend) whose executions
// take 500 ms, one at a time, with sequences kept a minute when idle.
const slowSeqConfig = `backend: "identity"
max_batch_size: 1
sequence_batching { max_sequence_idle_microseconds: 60000000 }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "execute_delay_ms" value { string_value: "500" } }
`

type httpResult struct {
	status int
	body   string
}

func postJSON(t *testing.T, url, body string) httpResult {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return httpResult{0, err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, string(b)}
}

func seqRequest(id, value int, start bool) string {
	return fmt.Sprintf(`{"parameters":{"sequence_id":%d,"sequence_start":%v},"inputs":[{"name":"IN","datatype":"INT32","shape":[1,1],"data":[%d]}]}`,
		id, start, value)
}

// TestUnloadEndsSequences runs the whole constellation in one process in
// explicit mode: when a sequence model is unloaded, the requests of an
// active sequence already executing finish, those still queued at the
// sequence router fail saying the model was unloaded, later requests fail
// saying so at the gateway, and once the model is loaded again the
// sequence's next request is told that its sequence ended with the unload.
func TestUnloadEndsSequences(t *testing.T) {
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "slowseq", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "slowseq", "config.pbtxt"), []byte(slowSeqConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.ModelRepository, cfg.Models, cfg.ControlMode = repo, []string{"slowseq"}, executor.ControlExplicit
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	base := "http://" + srv.Gateway().HTTPAddr()
	infer := base + "/v2/models/slowseq/infer"
	waitReady(t, base)
	if r := postJSON(t, infer, seqRequest(7, 1, true)); r.status != 200 || !strings.Contains(r.body, `"data":[1]`) {
		t.Fatalf("START: %d %s", r.status, r.body)
	}

	const n = 5
	results := make(chan httpResult, n)
	for i := range n {
		go func() { results <- postJSON(t, infer, seqRequest(7, 10+i, false)) }()
	}
	// One of them has run: the next executes and the others wait in the
	// router's slot queue.
	deadline := time.Now().Add(30 * time.Second)
	for inferenceCount(t, base) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no request of the sequence ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := postJSON(t, base+"/v2/repository/models/slowseq/unload", ""); r.status != 200 {
		t.Fatalf("unload: %d %s", r.status, r.body)
	}
	const ended = "sequence 7 of model 'slowseq' ended: model 'slowseq' version 1 was unloaded"
	ok, refused := 0, 0
	for range n {
		select {
		case r := <-results:
			switch {
			case r.status == 200:
				ok++
			case strings.Contains(r.body, ended):
				refused++
			default:
				t.Fatalf("request of the sequence during the unload: %d %s", r.status, r.body)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a request of the sequence got no answer after the unload")
		}
	}
	if ok < 2 || refused == 0 {
		t.Fatalf("%d requests answered, %d refused: want the one executing at the unload answered and the queued ones refused", ok, refused)
	}

	r := postJSON(t, infer, seqRequest(7, 99, false))
	if r.status == 200 || !strings.Contains(r.body, "Request for unknown model: 'slowseq' has no available versions; the model was unloaded, which ended its sequences") {
		t.Fatalf("request of the sequence after the unload: %d %s", r.status, r.body)
	}

	if r := postJSON(t, base+"/v2/repository/models/slowseq/load", ""); r.status != 200 {
		t.Fatalf("load: %d %s", r.status, r.body)
	}
	waitReady(t, base)
	if r := postJSON(t, infer, seqRequest(7, 99, false)); r.status == 200 || !strings.Contains(r.body, ended) {
		t.Fatalf("request of the ended sequence once the model is back: %d %s", r.status, r.body)
	}
	if r := postJSON(t, infer, seqRequest(7, 5, true)); r.status != 200 || !strings.Contains(r.body, `"data":[5]`) {
		t.Fatalf("a new sequence with the id: %d %s", r.status, r.body)
	}
}

func inferenceCount(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/v2/models/slowseq/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		ModelStats []struct {
			InferenceCount int `json:"inference_count"`
		} `json:"model_stats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.ModelStats) != 1 {
		t.Fatalf("stats: %v %+v", err, st)
	}
	return st.ModelStats[0].InferenceCount
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/v2/models/slowseq/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("slowseq never ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
