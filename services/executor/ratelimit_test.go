package executor

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The "test_rate_limited" backend measures what the rate limiter lets
// run: each execution holds, while it runs, the count of resource "R" its
// instance group's rate_limiter asks for, and rateGauge records the most
// held at once over every model of the process.
func init() {
	backend.Register("test_rate_limited", func(context.Context) (backend.Backend, error) { return rateLimitedBackend{}, nil })
}

var rateGauge struct {
	mu         sync.Mutex
	held, peak int
	executions map[string]int // by model
}

// resetRateGauge starts a test's measure.
func resetRateGauge() {
	rateGauge.mu.Lock()
	defer rateGauge.mu.Unlock()
	rateGauge.held, rateGauge.peak, rateGauge.executions = 0, 0, map[string]int{}
}

// rateGaugeRead returns what is held now, the most held at once, and the
// executions of model.
func rateGaugeRead(model string) (held, peak, executions int) {
	rateGauge.mu.Lock()
	defer rateGauge.mu.Unlock()
	return rateGauge.held, rateGauge.peak, rateGauge.executions[model]
}

type rateLimitedBackend struct{}

func (rateLimitedBackend) NewModel(_ context.Context, info backend.ModelInfo) (backend.Model, error) {
	m := &rateLimitedModel{cfg: info.Config, delay: 20 * time.Millisecond}
	if p, ok := info.Config.GetParameters()["delay_ms"]; ok {
		ms, err := strconv.Atoi(p.GetStringValue())
		if err != nil {
			return nil, err
		}
		m.delay = time.Duration(ms) * time.Millisecond
	}
	return m, nil
}
func (rateLimitedBackend) Finalize() error { return nil }

type rateLimitedModel struct {
	cfg   *inference.ModelConfig
	delay time.Duration
}

func (m *rateLimitedModel) NewInstance(_ context.Context, info backend.InstanceInfo) (backend.Instance, error) {
	in := &rateLimitedInstance{m: m}
	for _, r := range m.cfg.GetInstanceGroup()[info.Group].GetRateLimiter().GetResources() {
		if r.GetName() == "R" {
			in.weight += int(r.GetCount())
		}
	}
	return in, nil
}
func (m *rateLimitedModel) Finalize() error { return nil }

type rateLimitedInstance struct {
	m      *rateLimitedModel
	weight int
}

func (in *rateLimitedInstance) Finalize() error { return nil }

// Execute holds the instance's weight of R for the model's delay and
// answers OUTPUT0 = INPUT0.
func (in *rateLimitedInstance) Execute(ctx context.Context, reqs []*backend.Request) error {
	rateGauge.mu.Lock()
	rateGauge.held += in.weight
	rateGauge.peak = max(rateGauge.peak, rateGauge.held)
	rateGauge.executions[in.m.cfg.GetName()]++
	rateGauge.mu.Unlock()
	defer func() {
		rateGauge.mu.Lock()
		rateGauge.held -= in.weight
		rateGauge.mu.Unlock()
	}()
	select {
	case <-time.After(in.m.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, r := range reqs {
		x := r.Input("INPUT0")
		r.Respond(backend.Output{Name: "OUTPUT0", DataType: tensor.FP32, Shape: x.Shape, Data: x.Data})
	}
	return nil
}

// limitedModel is a model of the test backend with instances instances
// whose group's rate_limiter is rl, executions of delayMs.
func limitedModel(name string, instances int, rl string, delayMs int, extra string) string {
	return fmt.Sprintf(`name: %q backend: "test_rate_limited"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: %d kind: KIND_CPU %s } ]
parameters { key: "delay_ms" value { string_value: "%d" } }
%s`, name, instances, rl, delayMs, extra)
}

// one is a request of model's one FP32 value.
func one(v float32) *inference.ModelInferRequest {
	return request("", []tin{{"INPUT0", "FP32", []int64{1}, tensor.AppendFloat32s(nil, v)}})
}

// runRateLimited runs an executor with the rate limiter settings over repo.
func runRateLimited(t *testing.T, repo string, mode RateLimitMode, explicit bool, resources ...string) *harness {
	t.Helper()
	url := startNATS(t)
	h := &harness{t: t, url: url}
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	h.client = client
	cfg := Config{RepositoryPath: repo, ID: "ex-1", Node: "node-a", RateLimit: mode}
	if explicit {
		cfg.ControlMode = ControlExplicit
	}
	for _, s := range resources {
		r, err := ParseRateLimitResource(s)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RateLimitResources = append(cfg.RateLimitResources, r)
	}
	h.ex, h.stop = runExecutor(t, url, cfg)
	return h
}

// TestRateLimitedExecutionsNeverExceedResources sends many requests at
// once to three models sharing resource R (instances holding 1 and 2 of
// it, and instances needing none) and measures, inside the backend, the
// most of R held by executions at once: with --rate-limit execution_count
// it never exceeds the count given (--rate-limit-resource R:3), or by
// default the most any instance asks for (2), while executions still run
// side by side; with --rate-limit off the settings are ignored, as
// Triton ignores them.
func TestRateLimitedExecutionsNeverExceedResources(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "small", limitedModel("small", 3, `rate_limiter { resources [ { name: "R" count: 1 } ] }`, 30, ""))
	writeModel(t, repo, "large", limitedModel("large", 2, `rate_limiter { resources [ { name: "R" count: 2 } ] priority: 2 }`, 30, ""))
	writeModel(t, repo, "free", limitedModel("free", 2, "", 30, ""))

	for _, tc := range []struct {
		name      string
		mode      RateLimitMode
		resources []string
		most      int // the most of R held at once; 0: unbounded
	}{
		{"execution_count with R:3", RateLimitExecutionCount, []string{"R:3"}, 3},
		{"execution_count, default counts", RateLimitExecutionCount, nil, 2},
		{"off", RateLimitOff, []string{"R:3"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := runRateLimited(t, repo, tc.mode, false, tc.resources...)
			resetRateGauge()
			var wg sync.WaitGroup
			errs := make(chan error, 60)
			for i := range 20 {
				for _, model := range []string{"small", "large", "free"} {
					wg.Go(func() {
						v := float32(i)
						resp, err := h.infer(model, one(v))
						if err != nil {
							errs <- fmt.Errorf("%s: %w", model, err)
							return
						}
						if got := tensor.Float32s(resp.GetRawOutputContents()[0]); len(got) != 1 || got[0] != v {
							errs <- fmt.Errorf("%s: answered %v to %v", model, got, v)
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			_, peak, _ := rateGaugeRead("")
			for _, model := range []string{"small", "large", "free"} {
				if _, _, n := rateGaugeRead(model); n != 20 {
					t.Errorf("%s: %d executions, want 20", model, n)
				}
			}
			switch {
			case tc.most == 0 && peak <= 3:
				t.Errorf("rate limiter off: at most %d of R held at once, want the settings ignored (up to 7)", peak)
			case tc.most > 0 && peak > tc.most:
				t.Errorf("%d of R held at once, there are %d", peak, tc.most)
			case tc.most > 0 && peak < 2:
				t.Errorf("at most %d of R held at once: executions that fit together did not run together", peak)
			}
		})
	}
}

// TestRateLimitedWarmup: warmup executions wait for their resources like
// any other (Triton runs warmup through the rate limiter): a model loaded
// while another holds the only copy of R warms up once that execution
// ends, never beside it.
func TestRateLimitedWarmup(t *testing.T) {
	repo := t.TempDir()
	rl := `rate_limiter { resources [ { name: "R" count: 1 } ] }`
	writeModel(t, repo, "holder", limitedModel("holder", 1, rl, 400, ""))
	writeModel(t, repo, "warm", limitedModel("warm", 1, rl, 10,
		`model_warmup [ { name: "zeros" batch_size: 1 count: 2 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]`))
	h := runRateLimited(t, repo, RateLimitExecutionCount, true, "R:1")
	if reply := h.load("holder"); reply.GetError() != "" {
		t.Fatal(reply.GetError())
	}
	resetRateGauge()
	done := make(chan error, 1)
	go func() {
		_, err := h.infer("holder", one(1))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for held, _, _ := rateGaugeRead(""); held == 0; held, _, _ = rateGaugeRead("") {
		if time.Now().After(deadline) {
			t.Fatal("holder's execution did not start")
		}
		time.Sleep(time.Millisecond)
	}
	if reply := h.load("warm"); reply.GetError() != "" {
		t.Fatal(reply.GetError())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, peak, n := rateGaugeRead("warm")
	if n != 2 {
		t.Errorf("warm: %d warmup executions, want 2", n)
	}
	if peak > 1 {
		t.Errorf("%d of R held at once, there is 1: warmup ran beside the execution holding it", peak)
	}
}

// TestRateLimitRefusesLoad: a model whose instances need more than the
// executor's counts fails to load with Triton's message (a resource not
// given has none), as does one whose resource is both global and per
// device; the limits of the refused model are not kept, so a model that
// fits loads after them. With --rate-limit off the same models load.
func TestRateLimitRefusesLoad(t *testing.T) {
	repo := t.TempDir()
	writeModel(t, repo, "needy", limitedModel("needy", 1, `rate_limiter { resources [ { name: "R" count: 2 } ] }`, 1, ""))
	writeModel(t, repo, "unknown", limitedModel("unknown", 1, `rate_limiter { resources [ { name: "S" count: 1 } ] }`, 1, ""))
	writeModel(t, repo, "fits", limitedModel("fits", 2, `rate_limiter { resources [ { name: "R" count: 1 } ] }`, 1, ""))
	writeModel(t, repo, "both", `name: "both" backend: "test_rate_limited"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [
  { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "G" global: true count: 1 } ] } },
  { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "G" count: 1 } ] } }
]`)

	t.Run("execution_count", func(t *testing.T) {
		h := runRateLimited(t, repo, RateLimitExecutionCount, true, "R:1", "G:1")
		for _, tc := range []struct{ model, reason string }{
			{"needy", `Resource count for "R" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2`},
			{"unknown", `Resource count for "S" is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 1`},
			{"both", `Resource "G" is present as both global and device-specific resource in the model configuration.`},
		} {
			reply := h.load(tc.model)
			if want := "failed to load '" + tc.model + "' version 1: " + tc.reason; reply.GetError() != want || reply.GetErrorKind() != tritonerr.Internal.String() {
				t.Errorf("load %s:\n got %s %q\nwant %s %q", tc.model, reply.GetErrorKind(), reply.GetError(), tritonerr.Internal, want)
			}
			if state, reason := versionState(reply.GetCatalog(), tc.model); state != StateUnavailable || reason != tc.reason {
				t.Errorf("%s is %s (%q), want UNAVAILABLE (%q)", tc.model, state, reason, tc.reason)
			}
		}
		if reply := h.load("fits"); reply.GetError() != "" {
			t.Fatalf("load fits: %s", reply.GetError())
		}
		if _, err := h.infer("fits", one(2)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("off", func(t *testing.T) {
		h := runRateLimited(t, repo, RateLimitOff, true, "R:1", "G:1")
		for _, model := range []string{"needy", "unknown", "both", "fits"} {
			if reply := h.load(model); reply.GetError() != "" {
				t.Errorf("load %s with the rate limiter off: %s", model, reply.GetError())
			}
		}
	})
}

// TestRateLimitWaitIsQueueTime: an execution waiting for its resources
// has not started, so the wait counts in the model's queue time, not its
// compute time, as Triton counts it: a request of "waiter" sent while
// "holder" holds the only R for 300 ms queues for about that long and
// computes for about its own 10 ms.
func TestRateLimitWaitIsQueueTime(t *testing.T) {
	repo := t.TempDir()
	rl := `rate_limiter { resources [ { name: "R" count: 1 } ] }`
	writeModel(t, repo, "holder", limitedModel("holder", 1, rl, 300, ""))
	writeModel(t, repo, "waiter", limitedModel("waiter", 1, rl, 10, ""))
	h := runRateLimited(t, repo, RateLimitExecutionCount, false, "R:1")
	resetRateGauge()
	held := make(chan error, 1)
	go func() {
		_, err := h.infer("holder", one(1))
		held <- err
	}()
	waitUntil(t, "holder executing", func() bool { _, _, n := rateGaugeRead("holder"); return n > 0 })
	if _, err := h.infer("waiter", one(2)); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	st := h.stats("waiter", "").GetModelStats()[0].GetInferenceStats()
	queue, compute := time.Duration(st.GetQueue().GetNs()), time.Duration(st.GetComputeInfer().GetNs())
	if queue < 150*time.Millisecond || compute >= 150*time.Millisecond {
		t.Fatalf("waiter: queue %v, compute %v; want the wait for R (most of 300 ms) in queue, compute its own 10 ms", queue, compute)
	}
}
