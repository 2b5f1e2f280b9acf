package standalone

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
)

// The schedule policy extension and the dynamic batcher's queue policies
// (testdata/schedpolicy), over HTTP and gRPC against the standalone
// server, its gateway reaching the executor over the embedded NATS
// server: priorities, max_queue_size, timeouts with REJECT and DELAY,
// allow_timeout_override, with Triton's statuses and messages. Each model
// has one instance slowed by the identity backend's execute_delay_ms, so
// that a backlog forms behind the request executing.

// spServer is the standalone server over testdata/schedpolicy.
type spServer struct {
	http    string // base URL
	metrics string // base URL
	grpc    inference.GRPCInferenceServiceClient
}

var spModels = []string{"sp_full", "sp_reject", "sp_override", "sp_no_override", "sp_delay", "sp_priority"}

func startSchedPolicy(t *testing.T) *spServer {
	t.Helper()
	cfg := testConfig(t)
	cfg.ModelRepository = "testdata/schedpolicy"
	cfg.Models = spModels
	cfg.InProcessBus = false // over NATS, as between the constellation's services
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	s := &spServer{http: "http://" + srv.Gateway().HTTPAddr(), metrics: "http://" + srv.Gateway().MetricsAddr()}
	for _, m := range spModels {
		waitModel(t, s.http, m)
	}
	conn, err := grpc.NewClient(srv.Gateway().GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.grpc = inference.NewGRPCInferenceServiceClient(conn)
	return s
}

func waitModel(t *testing.T, base, model string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get(base + "/v2/models/" + model + "/ready")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("model %s not ready", model)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outcome is what came back for one request: the HTTP status or the gRPC
// code's name ("OK" for success), the error message, and when it came.
type outcome struct {
	name   string
	status string
	msg    string
	at     time.Time
}

// spProtocol sends one inference request of 4 FP32 to a model with the
// schedule policy parameters asked for (0: not sent), as Triton's clients
// send them.
type spProtocol struct {
	name  string
	infer func(t *testing.T, s *spServer, model, id string, priority, timeoutUs uint64) outcome
}

var spProtocols = []spProtocol{
	{"HTTP", func(t *testing.T, s *spServer, model, id string, priority, timeoutUs uint64) outcome {
		params := map[string]any{}
		if priority != 0 {
			params["priority"] = priority
		}
		if timeoutUs != 0 {
			params["timeout"] = timeoutUs
		}
		body := map[string]any{
			"inputs": []any{map[string]any{"name": "INPUT0", "shape": []int{4}, "datatype": "FP32", "data": []float32{1, 2, 3, 4}}},
		}
		if id != "" {
			body["id"] = id
		}
		if len(params) > 0 {
			body["parameters"] = params
		}
		b, _ := json.Marshal(body)
		r, err := http.Post(s.http+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Error(err)
			return outcome{status: "transport error", msg: err.Error(), at: time.Now()}
		}
		defer r.Body.Close()
		data, _ := io.ReadAll(r.Body)
		o := outcome{status: fmt.Sprint(r.StatusCode), at: time.Now()}
		if r.StatusCode != http.StatusOK {
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(data, &e); err != nil {
				t.Errorf("%d %q is not Triton's error body: %v", r.StatusCode, data, err)
			}
			o.msg = e.Error
		}
		return o
	}},
	{"gRPC", func(t *testing.T, s *spServer, model, id string, priority, timeoutUs uint64) outcome {
		raw := make([]byte, 16)
		for i := range 4 {
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(i))
		}
		req := &inference.ModelInferRequest{
			ModelName: model, Id: id,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{4}}},
			RawInputContents: [][]byte{raw},
			Parameters:       map[string]*inference.InferParameter{},
		}
		// As tritonclient.grpc sets them: priority as uint64_param,
		// timeout as int64_param.
		if priority != 0 {
			req.Parameters["priority"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: priority}}
		}
		if timeoutUs != 0 {
			req.Parameters["timeout"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(timeoutUs)}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.grpc.ModelInfer(ctx, req)
		st := status.Convert(err)
		return outcome{status: st.Code().String(), msg: st.Message(), at: time.Now()}
	}},
}

// backlog sends requests one after the other, each on its own goroutine
// once the one before has had time to reach the executor (gap), and
// collects their outcomes.
type backlog struct {
	mu  sync.Mutex
	out []outcome
	wg  sync.WaitGroup
}

func (b *backlog) send(name string, f func() outcome, gap time.Duration) {
	b.wg.Go(func() {
		o := f()
		o.name = name
		b.mu.Lock()
		b.out = append(b.out, o)
		b.mu.Unlock()
	})
	time.Sleep(gap)
}

// wait waits for every request and returns the outcomes by name, and the
// names in the order their answers came.
func (b *backlog) wait() (map[string]outcome, []string) {
	b.wg.Wait()
	slices.SortFunc(b.out, func(x, y outcome) int { return x.at.Compare(y.at) })
	byName := map[string]outcome{}
	var order []string
	for _, o := range b.out {
		byName[o.name] = o
		order = append(order, o.name)
	}
	return byName, order
}

// pending waits until the model's nv_inference_pending_request_count is n.
func (s *spServer) pending(t *testing.T, model string, n int) {
	t.Helper()
	want := fmt.Sprintf(`nv_inference_pending_request_count{model="%s",version="1"} %d`, model, n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get(s.metrics + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if strings.Contains(string(b), want+"\n") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never %d requests queued", model, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantStatus is the status of a success and of Triton's UNAVAILABLE, by
// protocol.
func wantStatus(proto string, ok bool) string {
	switch {
	case ok && proto == "HTTP":
		return "200"
	case ok:
		return "OK"
	case proto == "HTTP":
		return "503"
	}
	return "Unavailable"
}

func checkOutcome(t *testing.T, proto string, o outcome, ok bool, msg string) {
	t.Helper()
	if o.status != wantStatus(proto, ok) || o.msg != msg {
		t.Errorf("%s: %s %q; want %s %q", o.name, o.status, o.msg, wantStatus(proto, ok), msg)
	}
}

// A request arriving at the executor takes this long at most, with room
// to spare: requests sent this far apart arrive in order, well within an
// execution (600 ms or more).
const arrival = 100 * time.Millisecond

func TestSchedulePolicy(t *testing.T) {
	s := startSchedPolicy(t)
	t.Run("group", func(t *testing.T) { schedulePolicyCases(t, s) })

	// The refusals and timeouts count as Triton counts them: REJECTED.
	r, err := http.Get(s.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for model, n := range map[string]int{"sp_full": 4, "sp_reject": 2, "sp_override": 2, "sp_no_override": 0, "sp_delay": 0, "sp_priority": 0} {
		want := fmt.Sprintf(`nv_inference_request_failure{model="%s",reason="REJECTED",version="1"} %d`, model, n)
		if !strings.Contains(string(page), want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func schedulePolicyCases(t *testing.T, s *spServer) {
	// max_queue_size 2: with one request executing and two queued, a
	// fourth is refused with Triton's UNAVAILABLE, its request id first;
	// the others run.
	t.Run("queue full", func(t *testing.T) {
		t.Parallel()
		for _, p := range spProtocols {
			var b backlog
			for _, name := range []string{"a", "b", "c"} {
				b.send(name, func() outcome { return p.infer(t, s, "sp_full", name, 0, 0) }, 0)
			}
			s.pending(t, "sp_full", 2)
			refused := p.infer(t, s, "sp_full", "d", 0, 0)
			refused.name = "d"
			checkOutcome(t, p.name, refused, false, "[request id: d] Exceeds maximum queue size")
			anonymous := p.infer(t, s, "sp_full", "", 1, 0)
			anonymous.name = "no id"
			checkOutcome(t, p.name, anonymous, false, "Exceeds maximum queue size")
			got, _ := b.wait()
			for _, name := range []string{"a", "b", "c"} {
				checkOutcome(t, p.name, got[name], true, "")
			}
		}
	})

	// REJECT with a 100 ms default timeout: a request queued behind a
	// 600 ms execution fails with "Request timeout expired" when its
	// timeout passes, before the execution ahead of it ends.
	t.Run("timeout REJECT", func(t *testing.T) {
		t.Parallel()
		for _, p := range spProtocols {
			var b backlog
			b.send("a", func() outcome { return p.infer(t, s, "sp_reject", "a", 0, 0) }, arrival)
			b.send("b", func() outcome { return p.infer(t, s, "sp_reject", "b", 0, 0) }, 0)
			got, order := b.wait()
			checkOutcome(t, p.name, got["a"], true, "")
			checkOutcome(t, p.name, got["b"], false, "Request timeout expired")
			if !slices.Equal(order, []string{"b", "a"}) {
				t.Errorf("%s: answers in order %v: the rejection waited for the execution ahead", p.name, order)
			}
		}
	})

	// allow_timeout_override: a request's shorter timeout (50 ms) applies
	// to it alone; without the override it is ignored and the 5 s default
	// holds.
	t.Run("timeout override", func(t *testing.T) {
		t.Parallel()
		for _, p := range spProtocols {
			var b backlog
			b.send("a", func() outcome { return p.infer(t, s, "sp_override", "a", 0, 0) }, arrival)
			b.send("short", func() outcome { return p.infer(t, s, "sp_override", "short", 0, 50000) }, arrival)
			b.send("default", func() outcome { return p.infer(t, s, "sp_override", "default", 0, 0) }, 0)
			got, _ := b.wait()
			checkOutcome(t, p.name, got["a"], true, "")
			checkOutcome(t, p.name, got["short"], false, "Request timeout expired")
			checkOutcome(t, p.name, got["default"], true, "")

			var c backlog
			c.send("a", func() outcome { return p.infer(t, s, "sp_no_override", "a", 0, 0) }, arrival)
			c.send("short", func() outcome { return p.infer(t, s, "sp_no_override", "short", 0, 50000) }, 0)
			got, order := c.wait()
			checkOutcome(t, p.name, got["a"], true, "")
			checkOutcome(t, p.name, got["short"], true, "")
			if !slices.Equal(order, []string{"a", "short"}) {
				t.Errorf("%s: answers in order %v", p.name, order)
			}
		}
	})

	// DELAY: a request whose (overridden, 50 ms) timeout passes is not
	// failed but served after the request queued behind it that is still
	// in time.
	t.Run("timeout DELAY", func(t *testing.T) {
		t.Parallel()
		for _, p := range spProtocols {
			var b backlog
			b.send("a", func() outcome { return p.infer(t, s, "sp_delay", "a", 0, 0) }, arrival)
			b.send("late", func() outcome { return p.infer(t, s, "sp_delay", "late", 0, 50000) }, arrival)
			b.send("in time", func() outcome { return p.infer(t, s, "sp_delay", "in time", 0, 0) }, 0)
			s.pending(t, "sp_delay", 2)
			got, order := b.wait()
			for _, name := range []string{"a", "late", "in time"} {
				checkOutcome(t, p.name, got[name], true, "")
			}
			if !slices.Equal(order, []string{"a", "in time", "late"}) {
				t.Errorf("%s: executed in order %v, want [a in time late]", p.name, order)
			}
		}
	})

	// Two priority levels, 2 by default: behind a backlog of default and
	// low priority requests (priority 0, 2, and 7, past priority_levels,
	// all at level 2), the two asking for priority 1 run first, in their
	// order; the rest in theirs.
	t.Run("priority order", func(t *testing.T) {
		t.Parallel()
		for _, p := range spProtocols {
			var b backlog
			gap := 20 * time.Millisecond // keeps the arrival order
			b.send("running", func() outcome { return p.infer(t, s, "sp_priority", "running", 0, 0) }, arrival)
			for _, r := range []struct {
				name     string
				priority uint64
			}{{"low1", 2}, {"low2", 0}, {"high1", 1}, {"low3", 7}, {"high2", 1}} {
				b.send(r.name, func() outcome { return p.infer(t, s, "sp_priority", r.name, r.priority, 0) }, gap)
			}
			s.pending(t, "sp_priority", 5)
			got, order := b.wait()
			for _, o := range got {
				checkOutcome(t, p.name, o, true, "")
			}
			if want := []string{"running", "high1", "high2", "low1", "low2", "low3"}; !slices.Equal(order, want) {
				t.Errorf("%s: completed in order %v, want %v", p.name, order, want)
			}
		}
	})
}

// TestSchedulePolicyMetadata checks that server metadata lists the
// schedule_policy extension, over HTTP and gRPC.
func TestSchedulePolicyMetadata(t *testing.T) {
	cfg := testConfig(t)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, srv)
	r, err := http.Get("http://" + srv.Gateway().HTTPAddr() + "/v2")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var md struct {
		Extensions []string `json:"extensions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&md); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(md.Extensions, "schedule_policy") {
		t.Errorf("HTTP server metadata extensions %v lack schedule_policy", md.Extensions)
	}
	conn, err := grpc.NewClient(srv.Gateway().GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := inference.NewGRPCInferenceServiceClient(conn).ServerMetadata(context.Background(), &inference.ServerMetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(resp.GetExtensions(), "schedule_policy") {
		t.Errorf("gRPC server metadata extensions %v lack schedule_policy", resp.GetExtensions())
	}
}
