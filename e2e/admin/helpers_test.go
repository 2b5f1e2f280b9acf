package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/bus"
)

// models are what the executors of these tests serve: a stateless model
// and a sequence model whose state lives in the executor (an accumulator:
// START sets it, later requests add their INPUT, END adds the sequence id).
var models = []string{"simple", "simple_string_dyna_sequence"}

const seqModel = "simple_string_dyna_sequence"

// env is a constellation with a gateway serving the admin API.
type env struct {
	c        *constellation.Cluster
	redis    string
	repo     string
	execs    map[string]*constellation.Proc
	g        *constellation.Gateway
	adminRPC string // host:port of the admin gRPC endpoint
	adminURL string // base URL of the admin REST endpoint
	admin    adminv1.AdminClient
}

// start runs NATS, Redis, a sequence router, a shm-registry, the named
// executors and a gateway with the admin API (and extra gateway flags).
func start(t *testing.T, executors []string, gatewayArgs ...string) *env {
	t.Helper()
	e := &env{c: constellation.NewCluster(t), repo: constellation.RepoPath(t, "deploy/model_repository"), execs: map[string]*constellation.Proc{}}
	e.redis, _ = constellation.Redis(t)
	constellation.Start(t, "router", e.c.Bin.Path("nereid-sequence-router"), "--nats-url", e.c.NATSURL, "--redis-url", e.redis, "--id", "router0")
	constellation.Start(t, "shm-registry", e.c.Bin.Path("nereid-shm-registry"), "--nats-url", e.c.NATSURL, "--redis-url", e.redis)
	for _, id := range executors {
		e.startExecutor(t, id)
	}
	rpcPort, httpPort := constellation.FreePort(t), constellation.FreePort(t)
	e.g = e.c.Gateway(append([]string{"--admin-port", strconv.Itoa(rpcPort), "--admin-http-port", strconv.Itoa(httpPort),
		"--allow-client-shm", "true"}, gatewayArgs...)...)
	e.adminRPC, e.adminURL = constellation.Addr(rpcPort), "http://"+constellation.Addr(httpPort)
	conn, err := grpc.NewClient(e.adminRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.admin = adminv1.NewAdminClient(conn)
	return e
}

func (e *env) startExecutor(t *testing.T, id string) *constellation.Proc {
	t.Helper()
	args := []string{}
	for _, m := range models {
		args = append(args, "--load-model", m)
	}
	p := e.c.Executor(e.repo, id, args...)
	e.execs[id] = p
	return p
}

// ctx is a call's context.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// waitFor fails the test when cond does not hold within a generous time
// (the machine may be loaded); what says what was awaited.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !constellation.WaitFor(60*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// executorIDs lists the executors the admin API reports over gRPC.
func (e *env) executorIDs(t *testing.T) []string {
	t.Helper()
	r, err := e.admin.ListExecutors(ctx(t), &adminv1.ListExecutorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range r.GetExecutors() {
		ids = append(ids, x.GetId())
	}
	return ids
}

// routerModel is the sequence model as the router leading it reports it,
// nil when no router leads it yet.
func (e *env) routerModel(t *testing.T) (*adminv1.SequenceRouter, *adminv1.RouterModel) {
	t.Helper()
	return e.routerModelOf(t, seqModel)
}

// routerModelOf is routerModel for any sequence model.
func (e *env) routerModelOf(t *testing.T, model string) (*adminv1.SequenceRouter, *adminv1.RouterModel) {
	t.Helper()
	r, err := e.admin.ListSequenceRouters(ctx(t), &adminv1.ListSequenceRoutersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range r.GetRouters() {
		for _, m := range rt.GetModels() {
			if m.GetName() == model {
				return rt, m
			}
		}
	}
	return nil, nil
}

// activeOn is how many sequences the router has bound to each executor's
// instances, and which executors it knows as draining.
func (e *env) activeOn(t *testing.T) (active map[string]int64, draining map[string]bool) {
	t.Helper()
	active, draining = map[string]int64{}, map[string]bool{}
	_, m := e.routerModel(t)
	for _, x := range m.GetExecutors() {
		active[x.GetId()] = x.GetActiveSequences()
		draining[x.GetId()] = x.GetDraining()
	}
	return active, draining
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// getJSON reads a REST endpoint of the admin API.
func getJSON(t *testing.T, url string, header http.Header, out any) int {
	t.Helper()
	return doJSON(t, "GET", url, header, nil, out)
}

func doJSON(t *testing.T, method, url string, header http.Header, body []byte, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// inferenceCount is how many inferences of model executor ran, as the
// executor itself reports its statistics on the bus.
func (e *env) inferenceCount(t *testing.T, executor, model string) uint64 {
	t.Helper()
	bc, err := bus.New(e.c.ConnectAs(bus.RoleGateway))
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	var st busv1.StatisticsReply
	if err := bc.Request(ctx(t), bus.ExecutorStatsSubject(executor), &busv1.StatisticsRequest{Name: model}, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.GetModelStats()) != 1 {
		t.Fatalf("statistics of %s on %s: %v", model, executor, st.GetModelStats())
	}
	return st.GetModelStats()[0].GetInferenceCount()
}

// seqInfer sends one request of sequence id to the accumulator over HTTP
// and returns its output, or fails the test.
func (e *env) seqInfer(t *testing.T, id string, v int32, start, end bool) int32 {
	t.Helper()
	params := map[string]any{"sequence_id": id}
	if start {
		params["sequence_start"] = true
	}
	if end {
		params["sequence_end"] = true
	}
	return e.infer(t, seqModel, params, []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "data": []int32{v}}})
}

// infer sends one JSON request and returns OUTPUT[0] of the first output.
func (e *env) infer(t *testing.T, model string, params map[string]any, inputs []any) int32 {
	t.Helper()
	req := map[string]any{"inputs": inputs}
	if params != nil {
		req["parameters"] = params
	}
	body, _ := json.Marshal(req)
	var out struct {
		Error   string `json:"error"`
		Outputs []struct {
			Data []int32 `json:"data"`
		} `json:"outputs"`
	}
	if code := doJSON(t, "POST", e.g.HTTP()+"/v2/models/"+model+"/infer", nil, body, &out); code != 200 {
		t.Fatalf("%s %v: %d %s", model, params, code, out.Error)
	}
	return out.Outputs[0].Data[0]
}

// simple runs the stateless add/sub model once and checks its sum.
func (e *env) simple(t *testing.T, a int32) {
	t.Helper()
	in := func(name string, v int32) map[string]any {
		d := make([]int32, 16)
		for i := range d {
			d[i] = v
		}
		return map[string]any{"name": name, "datatype": "INT32", "shape": []int{1, 16}, "data": d}
	}
	if got := e.infer(t, "simple", nil, []any{in("INPUT0", a), in("INPUT1", 1)}); got != a+1 {
		t.Fatalf("simple: %d + 1 = %d", a, got)
	}
}
