package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/compose"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/natsconn"
)

// requestTimeout is how long a client waits for one answer; a request still
// unanswered then has hung.
const requestTimeout = 30 * time.Second

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// postJSON posts body and decodes the answer; it returns the status and the
// error message of a failed request.
func postJSON(url string, body any, out any) (int, string, error) {
	return postJSONWithin(requestTimeout, url, body, out)
}

func postJSONWithin(timeout time.Duration, url string, body any, out any) (int, string, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, "", err
	}
	c := &http.Client{Timeout: timeout}
	resp, err := c.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "", err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e.Error, nil
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, "", fmt.Errorf("answer %q: %w", b, err)
		}
	}
	return resp.StatusCode, "", nil
}

func getJSON(url string, out any) (int, error) {
	c := &http.Client{Timeout: requestTimeout}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("answer %q: %w", b, err)
		}
	}
	return resp.StatusCode, nil
}

type inferOutput struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	Data     []int32 `json:"data"`
}

type inferAnswer struct {
	ModelName string        `json:"model_name"`
	Outputs   []inferOutput `json:"outputs"`
}

func (a inferAnswer) output(name string) []int32 {
	for _, o := range a.Outputs {
		if o.Name == name {
			return o.Data
		}
	}
	return nil
}

// simpleInputs are the inputs of Triton's "simple" example: INPUT0 0..15 and
// INPUT1 all ones (OUTPUT0 = sum, OUTPUT1 = difference).
func simpleBody() map[string]any {
	in0, in1 := make([]int32, 16), make([]int32, 16)
	for i := range in0 {
		in0[i], in1[i] = int32(i), 1
	}
	return map[string]any{"inputs": []any{
		map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "data": in0},
		map[string]any{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "data": in1},
	}}
}

// inferSimple sends one "simple" request over HTTP and checks the answer.
func inferSimple() error { return inferSimpleWithin(requestTimeout) }

// inferSimpleWithin is inferSimple with a client deadline of its own.
func inferSimpleWithin(timeout time.Duration) error {
	var a inferAnswer
	code, msg, err := postJSONWithin(timeout, httpBase+"/v2/models/simple/infer", simpleBody(), &a)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%d %s", code, msg)
	}
	sum, diff := a.output("OUTPUT0"), a.output("OUTPUT1")
	if len(sum) != 16 || len(diff) != 16 {
		return errWrong{fmt.Sprintf("outputs %+v", a.Outputs)}
	}
	for i := range 16 {
		if sum[i] != int32(i)+1 || diff[i] != int32(i)-1 {
			return errWrong{fmt.Sprintf("element %d: sum %d diff %d", i, sum[i], diff[i])}
		}
	}
	return nil
}

// seqInfer sends one value of a sequence over HTTP to model and returns
// OUTPUT[0], or the status and error message.
func seqInfer(model string, id any, value int32, start, end bool) (int32, int, string, error) {
	params := map[string]any{"sequence_id": id}
	if start {
		params["sequence_start"] = true
	}
	if end {
		params["sequence_end"] = true
	}
	body := map[string]any{
		"parameters": params,
		"inputs":     []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "data": []int32{value}}},
	}
	var a inferAnswer
	code, msg, err := postJSON(httpBase+"/v2/models/"+model+"/infer", body, &a)
	if err != nil || code != http.StatusOK {
		return 0, code, msg, err
	}
	out := a.output("OUTPUT")
	if len(out) != 1 {
		return 0, code, "", fmt.Errorf("outputs %+v", a.Outputs)
	}
	return out[0], code, "", nil
}

// accumulate adds v to the sequence id of simple_string_dyna_sequence, whose
// sum lives in the executor instance holding the sequence, and fails the test
// unless it is answered. Nothing is sent twice: a request that provably did
// not run (its router was lost) is sent again by the gateway.
func accumulate(t *testing.T, id string, v int32, start, end bool) int32 {
	t.Helper()
	got, code, msg, err := seqInfer("simple_string_dyna_sequence", id, v, start, end)
	if err != nil || code != http.StatusOK {
		t.Fatalf("sequence %s: %d %s %v", id, code, msg, err)
	}
	return got
}

func grpcClient(t *testing.T) inference.GRPCInferenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return inference.NewGRPCInferenceServiceClient(conn)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// --- The bus, as a gateway sees it -------------------------------------------

// connectBus connects to the project's NATS as the gateway role (the compose
// file's development password, the role's inbox prefix), at the container's
// address.
func connectBus(t *testing.T) *bus.Conn {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	ids, err := proj.Containers(ctx, "nats")
	if err != nil || len(ids) != 1 {
		t.Fatalf("nats container: %v %v", ids, err)
	}
	ip, err := proj.IP(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	opts, err := natsconn.Auth{User: string(bus.RoleGateway), Password: "dev-gateway"}.Options(bus.RoleGateway)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond), nats.Name("e2e-containers"))
	nc, err := nats.Connect("nats://"+ip+":4222", opts...)
	if err != nil {
		t.Fatalf("connect to NATS at %s: %v", ip, err)
	}
	b, err := bus.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(); nc.Close() })
	return b
}

// executors follows the executors' heartbeats.
type executors struct {
	mu   sync.Mutex
	seen map[string]time.Time // last heartbeat
	gone map[string]bool      // withdrew
	node map[string]string
	b    *bus.Conn
}

func watchExecutors(t *testing.T) *executors {
	t.Helper()
	b := connectBus(t)
	e := &executors{seen: map[string]time.Time{}, gone: map[string]bool{}, node: map[string]string{}, b: b}
	sub, err := b.Subscribe(bus.HeartbeatSubject, func(_ context.Context, data []byte) {
		var hb busv1.ExecutorHeartbeat
		if proto.Unmarshal(data, &hb) != nil {
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.seen[hb.GetExecutorId()] = time.Now()
		e.gone[hb.GetExecutorId()] = hb.GetWithdraw()
		e.node[hb.GetExecutorId()] = hb.GetNode()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return e
}

// live lists the executors heard from within the heartbeat expiry, sorted.
func (e *executors) live() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id, at := range e.seen {
		if !e.gone[id] && time.Since(at) < bus.HeartbeatExpiry {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// waitLive waits until exactly n executors are live and returns them.
func (e *executors) waitLive(t *testing.T, n int, timeout time.Duration) []string {
	t.Helper()
	var ids []string
	if !waitFor(timeout, func() bool { ids = e.live(); return len(ids) == n }) {
		t.Fatalf("live executors %v, want %d", ids, n)
	}
	return ids
}

// inferences asks one executor how many inferences of model it has run.
func (e *executors) inferences(ctx context.Context, id, model string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var resp inference.ModelStatisticsResponse
	if err := e.b.Request(ctx, bus.ExecutorStatsSubject(id), &busv1.StatisticsRequest{Name: model}, &resp); err != nil {
		return 0, fmt.Errorf("statistics of executor %s: %w", id, err)
	}
	var n uint64
	for _, s := range resp.GetModelStats() {
		n += s.GetInferenceCount()
	}
	return n, nil
}

// counts is inferences of model for each of ids.
func (e *executors) counts(t *testing.T, ids []string, model string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, id := range ids {
		n, err := e.inferences(ctxFor(t, 10*time.Second), id, model)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

// --- Load and what it saw ----------------------------------------------------

type outcome struct {
	start, end time.Time
	err        error
}

// load sends requests from several workers until stopped.
type load struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	mu   sync.Mutex
	res  []outcome
}

func startLoad(workers int, req func() error) *load {
	return startLoadEach(workers, func(int) func() error { return req })
}

// startLoadEach is startLoad with a request function of each worker's own
// (mk(w) for worker w), for clients that keep state between requests.
func startLoadEach(workers int, mk func(w int) func() error) *load {
	l := &load{stop: make(chan struct{})}
	for w := range workers {
		req := mk(w)
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				s := time.Now()
				err := req()
				l.mu.Lock()
				l.res = append(l.res, outcome{s, time.Now(), err})
				l.mu.Unlock()
			}
		})
	}
	return l
}

// succeededSince counts the requests that started after at and succeeded.
func (l *load) succeededSince(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.res {
		if r.err == nil && r.start.After(at) {
			n++
		}
	}
	return n
}

// errWrong marks an answer that arrived but was not the right one.
type errWrong struct{ msg string }

func (e errWrong) Error() string { return "wrong answer: " + e.msg }

// seqClient is one client of a sequence load: it runs sequences of model
// one after another, each a START, steps-2 middle requests and an END adding
// 1, 2, ..., steps, and checks every running sum. A failed request abandons
// its sequence (its state is then unknown to the client) and the next
// request starts a new one; nothing is sent twice. id names the client's
// n-th sequence.
func seqClient(model string, steps int, id func(n int) any) func() error {
	n, step := 0, 0
	var sum int32
	return func() error {
		v := int32(step + 1)
		got, code, msg, err := seqInfer(model, id(n), v, step == 0, step == steps-1)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, msg)
		}
		if err != nil {
			n, step, sum = n+1, 0, 0
			return fmt.Errorf("sequence %v step %d: %w", id(n-1), v, err)
		}
		sum += v
		if got != sum {
			wrong := errWrong{fmt.Sprintf("sequence %v step %d: sum %d, want %d", id(n), v, got, sum)}
			n, step, sum = n+1, 0, 0
			return wrong
		}
		if step++; step == steps {
			n, step, sum = n+1, 0, 0
		}
		return nil
	}
}

// summary is what a load saw around a fault.
type summary struct {
	total, failed int
	wrong         int // answered, with a wrong result (counted in failed)
	hung          int // failed at the client's deadline
	res           []outcome
	slowest       time.Duration
	recovery      time.Duration // fault to the end of the last failed request (0: none failed)
	errors        map[string]int
}

// halt stops the load's clients and waits for them (again: nothing more).
func (l *load) halt() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

func (l *load) finish(fault time.Time) summary {
	l.halt()
	s := summary{errors: map[string]int{}, res: l.res}
	for _, r := range l.res {
		s.total++
		if d := r.end.Sub(r.start); d > s.slowest {
			s.slowest = d
		}
		if r.err != nil {
			s.failed++
			if errors.As(r.err, new(errWrong)) {
				s.wrong++
			}
			msg := r.err.Error()
			if len(msg) > 160 {
				msg = msg[:160]
			}
			s.errors[msg]++
			if strings.Contains(msg, "Client.Timeout") {
				s.hung++
			}
			if d := r.end.Sub(fault); d > s.recovery {
				s.recovery = d
			}
		}
	}
	return s
}

// failedAfter counts the failed requests that started after at.
func (s summary) failedAfter(at time.Time) int {
	n := 0
	for _, r := range s.res {
		if r.err != nil && r.start.After(at) {
			n++
		}
	}
	return n
}

// report prints the figures of a fault.
func (s summary) report(t *testing.T, fault string) {
	t.Helper()
	t.Logf("FAULT %s: %d requests, %d failed (%d of them wrong answers), recovery %v, slowest request %v",
		fault, s.total, s.failed, s.wrong, s.recovery.Round(time.Millisecond), s.slowest.Round(time.Millisecond))
	msgs := make([]string, 0, len(s.errors))
	for m := range s.errors {
		msgs = append(msgs, m)
	}
	slices.Sort(msgs)
	for _, m := range msgs {
		t.Logf("  %dx %s", s.errors[m], m)
	}
}

// executorContainers lists the executor containers, sorted.
func executorContainers(t *testing.T) []string {
	t.Helper()
	ids, err := proj.Containers(ctxFor(t, time.Minute), "executor")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	return ids
}

// scale brings the project to n executors and waits for all to be live.
func scale(t *testing.T, e *executors, n int) []string {
	t.Helper()
	if err := proj.Up(ctxFor(t, 5*time.Minute), "--scale", fmt.Sprintf("executor=%d", n)); err != nil {
		t.Fatal(err)
	}
	return e.waitLive(t, n, time.Minute)
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := compose.Docker(ctxFor(t, 2*time.Minute), args...)
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}
