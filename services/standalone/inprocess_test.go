package standalone

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// startServing starts a standalone server over the deploy repository's
// simple, simple_sequence and text_words (decoupled) models and waits
// until they are ready.
func startServing(t *testing.T, inProcess bool) (*Server, string) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Models = []string{"simple", "simple_sequence", "text_words"}
	cfg.AllowMetrics = false
	cfg.InProcessBus = inProcess
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	base := "http://" + srv.Gateway().HTTPAddr()
	for _, m := range cfg.Models {
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := http.Get(base + "/v2/models/" + m + "/ready")
			if err == nil {
				r.Body.Close()
				if r.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("model %s not ready", m)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return srv, base
}

// exchange is one HTTP request and what came back.
type exchange struct {
	Status int
	Body   any
}

func post(t *testing.T, url string, body string) exchange {
	t.Helper()
	r, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	data, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("POST %s: %d %q is not JSON: %v", url, r.StatusCode, data, err)
	}
	return exchange{r.StatusCode, v}
}

func simpleRequest(id string, in0, in1 []int) string {
	return fmt.Sprintf(`{"id":%q,"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":%s},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":%s}]}`,
		id, ints(in0), ints(in1))
}

func ints(v []int) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func seq16(f func(i int) int) []int {
	v := make([]int, 16)
	for i := range v {
		v[i] = f(i)
	}
	return v
}

// counts is what a model's statistics say about its requests, without
// the times (which differ between any two runs).
type counts struct {
	Inference, Execution      float64
	Success, Fail, Queue      float64
	BatchSizes                map[string]float64
	SuccessNs, FailNsPositive bool
}

func stats(t *testing.T, base, model string) counts {
	t.Helper()
	r, err := http.Get(base + "/v2/models/" + model + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var s struct {
		ModelStats []struct {
			InferenceCount float64 `json:"inference_count"`
			ExecutionCount float64 `json:"execution_count"`
			InferenceStats map[string]struct {
				Count float64 `json:"count"`
				Ns    float64 `json:"ns"`
			} `json:"inference_stats"`
			BatchStats []struct {
				BatchSize    float64 `json:"batch_size"`
				ComputeInfer struct {
					Count float64 `json:"count"`
				} `json:"compute_infer"`
			} `json:"batch_stats"`
		} `json:"model_stats"`
	}
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil || len(s.ModelStats) != 1 {
		t.Fatalf("stats of %s: %v (%d entries)", model, err, len(s.ModelStats))
	}
	m := s.ModelStats[0]
	c := counts{
		Inference: m.InferenceCount, Execution: m.ExecutionCount,
		Success: m.InferenceStats["success"].Count, Fail: m.InferenceStats["fail"].Count, Queue: m.InferenceStats["queue"].Count,
		BatchSizes:     map[string]float64{},
		SuccessNs:      m.InferenceStats["success"].Ns > 0,
		FailNsPositive: m.InferenceStats["fail"].Ns > 0 || m.InferenceStats["fail"].Count == 0,
	}
	for _, b := range m.BatchStats {
		c.BatchSizes[fmt.Sprint(b.BatchSize)] = b.ComputeInfer.Count
	}
	return c
}

// TestInProcessBusServesAsNATSDoes runs the same requests against a
// standalone server with its in-process bus on and one with it off, and
// requires the same answers, errors and statistics; the server with the
// bus on must have carried the direct requests in-process, the other none.
func TestInProcessBusServesAsNATSDoes(t *testing.T) {
	type step struct {
		name, model, body string
	}
	steps := []step{
		{"sum and difference", "simple", simpleRequest("r1", seq16(func(i int) int { return i }), seq16(func(int) int { return 1 }))},
		{"another", "simple", simpleRequest("r2", seq16(func(i int) int { return 100 - i }), seq16(func(i int) int { return i * i }))},
		{"unknown input", "simple", `{"inputs":[{"name":"INPUT9","shape":[1,16],"datatype":"INT32","data":` + ints(seq16(func(int) int { return 0 })) + `}]}`},
		{"wrong datatype", "simple", `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":` + ints(seq16(func(int) int { return 0 })) + `},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":` + ints(seq16(func(int) int { return 0 })) + `}]}`},
		{"wrong shape", "simple", `{"inputs":[{"name":"INPUT0","shape":[1,15],"datatype":"INT32","data":` + ints(make([]int, 15)) + `},{"name":"INPUT1","shape":[1,15],"datatype":"INT32","data":` + ints(make([]int, 15)) + `}]}`},
		{"unknown output", "simple", `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":` + ints(seq16(func(int) int { return 0 })) + `},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":` + ints(seq16(func(int) int { return 0 })) + `}],"outputs":[{"name":"OUTPUT7"}]}`},
		{"one output", "simple", `{"id":"r3","inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":` + ints(seq16(func(i int) int { return i })) + `},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":` + ints(seq16(func(i int) int { return i })) + `}],"outputs":[{"name":"OUTPUT1"}]}`},
		{"sequence start", "simple_sequence", `{"parameters":{"sequence_id":7,"sequence_start":true},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[5]}]}`},
		{"sequence middle", "simple_sequence", `{"parameters":{"sequence_id":7},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[3]}]}`},
		{"sequence end", "simple_sequence", `{"parameters":{"sequence_id":7,"sequence_end":true},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[4]}]}`},
		{"sequence unknown", "simple_sequence", `{"parameters":{"sequence_id":8},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[1]}]}`},
		{"sequence without id", "simple_sequence", `{"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[1]}]}`},
	}
	// A decoupled model's responses stream back (generate_stream: one
	// event per response), or fail before the first.
	streams := []string{
		`{"text_input": "Nereid streams every word", "max_tokens": 3, "delay_ms": 0}`,
		`{"text_input": "one", "delay_ms": 0}`,
		`{"text_input": 7}`,
	}
	type run struct {
		answers []exchange
		events  []string
		stats   map[string]counts
		direct  uint64
	}
	serve := func(inProcess bool) run {
		srv, base := startServing(t, inProcess)
		var r run
		for _, s := range steps {
			r.answers = append(r.answers, post(t, base+"/v2/models/"+s.model+"/infer", s.body))
		}
		for _, body := range streams {
			resp, err := http.Post(base+"/v2/models/text_words/generate_stream", "application/json", bytes.NewBufferString(body))
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			r.events = append(r.events, fmt.Sprintf("%d %s", resp.StatusCode, data))
		}
		r.direct = srv.InProcess()
		r.stats = map[string]counts{"simple": stats(t, base, "simple"), "simple_sequence": stats(t, base, "simple_sequence")}
		return r
	}
	fast, slow := serve(true), serve(false)
	for i, s := range steps {
		if !reflect.DeepEqual(fast.answers[i], slow.answers[i]) {
			t.Errorf("%s: in-process bus answered %+v, NATS %+v", s.name, fast.answers[i], slow.answers[i])
		}
	}
	if fast.answers[0].Status != http.StatusOK || fast.answers[2].Status != http.StatusBadRequest || fast.answers[7].Status != http.StatusOK {
		t.Fatalf("unexpected answers: %+v", fast.answers)
	}
	for i := range streams {
		if fast.events[i] != slow.events[i] {
			t.Errorf("generate_stream %s: in-process bus sent %q, NATS %q", streams[i], fast.events[i], slow.events[i])
		}
	}
	if want := "200 data: {\"model_name\":\"text_words\",\"model_version\":\"1\",\"text_output\":\"Nereid\"}"; !strings.HasPrefix(fast.events[0], want) ||
		strings.Count(fast.events[0], "data: ") != 3 {
		t.Errorf("generate_stream answered %q", fast.events[0])
	}
	if !reflect.DeepEqual(fast.stats, slow.stats) {
		t.Errorf("statistics differ: in-process bus %+v, NATS %+v", fast.stats, slow.stats)
	}
	if fast.stats["simple"].Success != 3 || fast.stats["simple"].Fail == 0 {
		t.Errorf("simple's statistics %+v: want 3 successes and the failures counted", fast.stats["simple"])
	}
	// Every request to simple and text_words reached the executor
	// in-process (sequence requests go over NATS, through the router);
	// the other server's never did.
	if fast.direct < 9 || slow.direct != 0 {
		t.Fatalf("requests carried in-process: %d with the bus on (want at least 9), %d with it off", fast.direct, slow.direct)
	}
}
