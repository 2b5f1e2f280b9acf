// Package durablestate tests durable implicit state (the model parameter
// state_durability "redis") end to end: NATS, a secured redis-server with
// its append-only file, a sequence router, two executors and a gateway as
// separate processes. An executor killed with SIGKILL in the middle of 32
// concurrent sequences, or Redis restarted under them, changes no output;
// afterwards Redis holds no state. The same model without the parameter
// loses the killed executor's sequences with errors naming it.
package durablestate

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

const (
	durable  = "implicit_accumulate_durable"
	volatile = "implicit_accumulate" // the same model without the parameter
	idle     = "durable_idle"        // durable, idle after half a second
	// sequences and requests of the runs.
	sequences = 32
	requests  = 20
)

type env struct {
	c         *constellation.Cluster
	redis     string
	redisPort int
	redisDir  string
	redisP    *constellation.Proc
	router    *constellation.Proc
	execs     []*constellation.Proc
	g         *constellation.Gateway
	grpc      inference.GRPCInferenceServiceClient
}

// start runs the constellation over the example model repository, with
// the router logging where sequences go and both executors' instances
// known to it before it returns.
func start(t *testing.T, executorArgs ...string) *env {
	t.Helper()
	e := &env{c: constellation.NewCluster(t), redisPort: constellation.FreePort(t), redisDir: t.TempDir()}
	e.startRedis(t)
	e.router = constellation.Start(t, "router", e.c.Bin.Path("nereid-sequence-router"), "--nats-url", e.c.NATSURL,
		"--redis-url", e.redis, "--id", "router0", "--log-verbose", "1")
	repo := constellation.RepoPath(t, "deploy/model_repository")
	for i := range 2 {
		e.execs = append(e.execs, e.c.Executor(repo, fmt.Sprintf("exec%d", i), append([]string{"--redis-url", e.redis,
			"--model-repository", constellation.RepoPath(t, "e2e/durablestate/testdata/model_repository"),
			"--load-model", durable, "--load-model", volatile, "--load-model", idle}, executorArgs...)...))
	}
	e.g = e.c.Gateway()
	for _, m := range []string{durable, volatile, idle} {
		if err := constellation.WaitHTTP(e.g.HTTP()+"/v2/models/"+m+"/ready", 200, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := grpc.NewClient(e.g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.grpc = inference.NewGRPCInferenceServiceClient(conn)
	return e
}

func (e *env) startRedis(t *testing.T) {
	t.Helper()
	e.redis, e.redisP = constellation.StartRedis(t, e.redisPort, e.redisDir)
}

// waitInstances waits until the router knows model's instances on both
// executors (it learns them from their first pulls).
func (e *env) waitInstances(t *testing.T, model string) {
	t.Helper()
	if !constellation.WaitFor(30*time.Second, func() bool {
		n := 0
		for _, line := range strings.Split(e.router.Output(), "\n") {
			if strings.Contains(line, `msg="instance adds its slots"`) && strings.Contains(line, "model="+model+" ") {
				n++
			}
		}
		return n >= 2
	}) {
		t.Fatalf("the router did not learn both executors' instances of %s:\n%s", model, e.router.Output())
	}
}

// stateKeys lists the durable state keys in Redis (SCAN, as the tests'
// read-only user: no service may list keys).
func (e *env) stateKeys(t *testing.T) string {
	t.Helper()
	out, err := constellation.RedisCLI(t, e.redis, redistest.Inspector, "--scan", "--pattern", "nereid:state:*")
	if err != nil {
		t.Fatalf("redis-cli --scan: %v %s", err, out)
	}
	return out
}

// value is the INPUT of request j of sequence i: distinct everywhere, so a
// request run twice or lost shows in every later output.
func value(i, j int) int32 { return int32(1000*(i+1) + j + 1) }

// want is what an uninterrupted run answers: the running sum.
func want(i, j int) int32 {
	var s int32
	for k := 0; k <= j; k++ {
		s += value(i, k)
	}
	return s
}

func request(model string, id uint64, v int32, start, end bool) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{ModelName: model,
		Parameters: map[string]*inference.InferParameter{
			"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(id)}},
			"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: start}},
			"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: end}},
		},
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(v))},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT"}},
	}
}

// infer sends one request and returns OUTPUT[0]. A request failed as not
// run (the router's lease lapsed while Redis restarted, and no router took
// the model yet) is sent again, for up to a minute: it was not run, so
// sending it again cannot run it twice.
func (e *env) infer(model string, id uint64, v int32, start, end bool) (int32, error) {
	retry := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		resp, err := e.grpc.ModelInfer(ctx, request(model, id, v, start, end))
		cancel()
		if err != nil {
			if strings.HasSuffix(err.Error(), "was not run") && time.Now().Before(retry) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return 0, err
		}
		b := resp.GetRawOutputContents()[0]
		return int32(binary.LittleEndian.Uint32(b)), nil
	}
}

// progress counts a run's answers.
type progress struct{ answered atomic.Int64 }

// run drives sequences concurrent sequences of requests each on model (ids
// base+1...) and returns their outputs; midway is called once, from one of
// the clients' goroutines, when half of the requests are answered.
func (e *env) run(t *testing.T, model string, base uint64, midway func(*progress)) [][]int32 {
	t.Helper()
	out := make([][]int32, sequences)
	errs := make([]error, sequences)
	var p progress
	answered := &p.answered
	var once sync.Once
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range sequences {
		out[i] = make([]int32, requests)
		wg.Go(func() {
			for j := range requests {
				got, err := e.infer(model, base+uint64(i)+1, value(i, j), j == 0, j == requests-1)
				if err != nil {
					errs[i] = fmt.Errorf("sequence %d request %d: %w", base+uint64(i)+1, j, err)
					return
				}
				out[i][j] = got
				if answered.Add(1) == sequences*requests/2 && midway != nil {
					once.Do(func() { midway(&p) })
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%s: %d sequences of %d requests in %v", model, sequences, requests, time.Since(t0).Round(time.Millisecond))
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// check compares outputs with an uninterrupted run's.
func check(t *testing.T, what string, ref, got [][]int32) {
	t.Helper()
	for i := range got {
		for j := range got[i] {
			if got[i][j] != ref[i][j] || got[i][j] != want(i, j) {
				t.Errorf("%s: sequence %d request %d answered %d; uninterrupted: %d (expected %d)", what, i, j, got[i][j], ref[i][j], want(i, j))
			}
		}
	}
}

// 32 sequences of 20 requests over two executors; one executor is killed
// with SIGKILL when half the requests are answered. The router moves its
// sequences to the other executor, which reads their last states from
// Redis; the request each was running when it died runs again from the
// last durable state. Every sequence completes with the outputs of a run
// without the kill, and no state is left in Redis.
func TestExecutorKilled(t *testing.T) {
	e := start(t)
	e.waitInstances(t, durable)
	ref := e.run(t, durable, 0, nil)
	check(t, "reference run", ref, ref)
	if keys := e.stateKeys(t); keys != "" {
		t.Fatalf("state keys left after the reference run:\n%s", keys)
	}

	var killedAt time.Time
	got := e.run(t, durable, 1000, func(*progress) {
		e.execs[0].Kill()
		killedAt = time.Now()
	})
	check(t, "run with exec0 killed", ref, got)
	if killedAt.IsZero() {
		t.Fatal("exec0 was not killed")
	}
	if !strings.Contains(e.router.Output(), "sequence moved from a lost executor") {
		t.Fatalf("no sequence was moved off exec0: the test proved nothing\n%s", e.router.Output())
	}
	t.Logf("resumed on exec1: %d sequences (%d requests run again)",
		strings.Count(e.execs[1].Output(), "durable sequence state resumed"), strings.Count(e.execs[1].Output(), "rerun=true"))
	if keys := e.stateKeys(t); keys != "" {
		t.Fatalf("state keys left after every sequence ended:\n%s", keys)
	}
}

// Redis is stopped when half the requests are answered, and started again
// (same port, same append-only file) once an executor found it gone when
// writing a state: the requests wait for it (the executors retry their
// writes, the router takes its lease back, requests it failed as not run
// are sent again), and every sequence completes with the outputs of an
// uninterrupted run.
func TestRedisRestarted(t *testing.T) {
	e := start(t, "--log-verbose", "1")
	e.waitInstances(t, durable)
	ref := make([][]int32, sequences)
	for i := range ref {
		ref[i] = make([]int32, requests)
		for j := range ref[i] {
			ref[i][j] = want(i, j)
		}
	}
	restarted := make(chan struct{})
	retrying := func() bool {
		return strings.Contains(e.execs[0].Output()+e.execs[1].Output(), `msg="durable sequence state: retrying"`)
	}
	got := e.run(t, durable, 2000, func(p *progress) {
		e.redisP.Stop()
		if !constellation.WaitFor(10*time.Second, retrying) {
			t.Errorf("no executor tried to write a state while Redis was down")
		}
		t.Logf("Redis down with %d of %d requests answered; a state write waits for it", p.answered.Load(), sequences*requests)
		e.startRedis(t)
		close(restarted)
	})
	<-restarted
	check(t, "run with Redis restarted", ref, got)
	if keys := e.stateKeys(t); keys != "" {
		t.Fatalf("state keys left after every sequence ended:\n%s", keys)
	}
}

// Without state_durability the state is lost with its executor, as in
// Triton: the requests the killed executor ran fail, and the next request
// of each of its sequences fails with the START error; both name it. The
// sequences on the other executor are unaffected.
func TestVolatileStateLost(t *testing.T) {
	e := start(t)
	e.waitInstances(t, volatile)
	const n = 4 // two sequences on each executor
	for i := range n {
		if got, err := e.infer(volatile, uint64(3001+i), value(i, 0), true, false); err != nil || got != want(i, 0) {
			t.Fatalf("start %d: %d %v", i, got, err)
		}
	}
	e.execs[0].Kill()
	lost, kept := 0, 0
	for i := range n {
		got, err := e.infer(volatile, uint64(3001+i), value(i, 1), false, false)
		switch {
		case err == nil:
			if got != want(i, 1) {
				t.Fatalf("sequence %d kept: %d, want %d", i, got, want(i, 1))
			}
			kept++
		case strings.Contains(err.Error(), "executor 'exec0'"):
			t.Logf("sequence %d: %v", i, err)
			lost++
		default:
			t.Fatalf("sequence %d: %v", i, err)
		}
	}
	if lost != n/2 || kept != n/2 {
		t.Fatalf("lost %d, kept %d: want %d each", lost, kept, n/2)
	}
}

// Unloading the model (explicit model control) deletes the durable states
// of the sequences its executors held: the sequences are over.
func TestUnloadDropsStates(t *testing.T) {
	e := start(t, "--model-control-mode", "explicit")
	e.waitInstances(t, durable)
	const n = 4
	for i := range n {
		for j := range 2 {
			if got, err := e.infer(durable, uint64(4001+i), value(i, j), j == 0, false); err != nil || got != want(i, j) {
				t.Fatalf("sequence %d request %d: %d %v", i, j, got, err)
			}
		}
	}
	if keys := strings.Fields(e.stateKeys(t)); len(keys) != n {
		t.Fatalf("%d state keys for %d open sequences: %v", len(keys), n, keys)
	}
	resp, err := http.Post(e.g.HTTP()+"/v2/repository/models/"+durable+"/unload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("unload: %d", resp.StatusCode)
	}
	if !constellation.WaitFor(10*time.Second, func() bool { return e.stateKeys(t) == "" }) {
		t.Fatalf("state keys left after the unload:\n%s", e.stateKeys(t))
	}
}

// A durable sequence that times out (max_sequence_idle_microseconds) loses
// its state in Redis too: the record expires twice the idle timeout plus
// 5 s after its last write, and its next request gets the START error.
func TestTimedOutStateExpires(t *testing.T) {
	e := start(t)
	if got, err := e.infer(idle, 5001, 3, true, false); err != nil || got != 3 {
		t.Fatalf("start: %d %v", got, err)
	}
	if keys := e.stateKeys(t); !strings.Contains(keys, "durable_idle") {
		t.Fatalf("no state key for the open sequence: %q", keys)
	}
	if !constellation.WaitFor(20*time.Second, func() bool { return e.stateKeys(t) == "" }) {
		t.Fatalf("the state of a timed-out sequence is still in Redis:\n%s", e.stateKeys(t))
	}
	if _, err := e.infer(idle, 5001, 1, false, false); err == nil || !strings.Contains(err.Error(), "must specify the START flag") {
		t.Fatalf("request after the timeout: %v", err)
	}
}
