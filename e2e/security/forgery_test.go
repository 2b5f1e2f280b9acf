package security

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/natsconn"
)

// intruder is a connection with a role's credentials that a compromised or
// buggy service of that role would have, counting the server's refusals.
type intruder struct {
	nc         *nats.Conn
	violations atomic.Int64
}

func connectIntruder(t *testing.T, c *constellation.Cluster, r bus.Role) *intruder {
	t.Helper()
	in := &intruder{}
	opts, err := natsconn.Auth{User: string(r), Password: constellation.RolePassword(r)}.Options(r)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors := err.Error(); strings.Contains(strings.ToLower(errors), "permissions violation") {
			in.violations.Add(1)
		}
	}))
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", r, err)
	}
	t.Cleanup(nc.Close)
	in.nc = nc
	return in
}

// replySubjects collects every reply subject an intruder sees, once.
type replySubjects struct {
	mu   sync.Mutex
	seen map[string]bool
	ch   chan string
}

func newReplySubjects() *replySubjects {
	return &replySubjects{seen: map[string]bool{}, ch: make(chan string, 1<<14)}
}

func (r *replySubjects) add(s string) {
	if !strings.HasPrefix(s, "_INBOX.") {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[s] {
		return
	}
	r.seen[s] = true
	select {
	case r.ch <- s:
	default:
	}
}

// addLines takes what a liveness probe or a cancellation would show of
// reply subjects.
func (r *replySubjects) addLines(data []byte) {
	for _, l := range bytes.FieldsFunc(data, func(c rune) bool { return c == '\n' || c == ' ' }) {
		r.add(string(l))
	}
}

// TestForgedRepliesRefused runs the constellation under the shipped
// per-role NATS configuration while two intruders attack the requests in
// flight: one with the shm-registry's credentials, one with a gateway's.
// They listen wherever their roles may (liveness probes, the registry's
// request subjects, every gateway inbox) to learn reply subjects; they publish well-formed inference responses into every reply
// subject they learn and into the subjects their roles may publish to
// next to them; and they cancel every request they can name. Every client
// gets its own outputs; the forged answers that reach the gateway are
// refused and counted (nereid_bus_forged_replies); no cancellation but a
// request's own gateway's has any effect.
func TestForgedRepliesRefused(t *testing.T) { attack(t, true) }

// TestCancellationOnlyByOwnGateway: an intruder with a gateway's
// credentials cancels every request of another gateway it can name, from
// every reply subject it sees in the liveness probes and in the gateways'
// inboxes, with and without guessed keys, and forges nothing: every
// client's request still runs to its end.
func TestCancellationOnlyByOwnGateway(t *testing.T) { attack(t, false) }

// attack runs the clients under the intruders; forge has them answer the
// requests too, not only cancel them.
func attack(t *testing.T, forge bool) {
	c := constellation.NewCluster(t)
	repo := constellation.RepoPath(t, "e2e/security/testdata/model_repository")
	ex := c.Executor(repo, "ex-slow")
	g := c.Gateway()
	if err := constellation.WaitHTTP(g.HTTP()+"/v2/models/slow/ready", 200, 30*time.Second); err != nil {
		t.Fatalf("slow never became ready: %v\n%s", err, ex.Output())
	}

	forged, err := proto.Marshal(&inference.ModelInferResponse{
		ModelName: "slow", ModelVersion: "1",
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUTPUT0", Datatype: "INT32", Shape: []int64{16}}},
		RawOutputContents: [][]byte{bytes.Repeat([]byte{0x7f, 0, 0, 0}, 16)},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := connectIntruder(t, c, bus.RoleShmRegistry)
	gw2 := connectIntruder(t, c, bus.RoleGateway)
	learned := newReplySubjects()
	var probeLeaks atomic.Int64
	listen := func(in *intruder, subj string, fn nats.MsgHandler) {
		if _, err := in.nc.Subscribe(subj, fn); err != nil {
			t.Fatal(err)
		}
	}
	// No client cancels here: the cancellations on the bus are the
	// intruders' own, and only the probes can show anything.
	for _, in := range []*intruder{reg, gw2} {
		listen(in, bus.AliveSubject, func(m *nats.Msg) {
			if bytes.Contains(m.Data, []byte("_INBOX.")) {
				probeLeaks.Add(1)
			}
			learned.addLines(m.Data)
		})
	}
	// The registry's own subjects: a gateway's shm call shows the registry
	// one of the gateway's reply subjects, and so its inbox prefix.
	listen(reg, bus.ShmStatusSubject, func(m *nats.Msg) {
		learned.add(m.Reply)
		_ = m.Respond(nil)
	})
	// A gateway may read every gateway's inboxes (what it sees there of the
	// intruders' own forgeries teaches it nothing).
	listen(gw2, bus.InboxPrefix(bus.RoleGateway)+".>", func(m *nats.Msg) {
		if !bytes.Equal(m.Data, forged) {
			learned.add(m.Subject)
		}
	})
	// Wider than the roles allow: refused.
	before := reg.violations.Load()
	for _, subj := range []string{"_INBOX.>", ">", bus.InferSubject("slow", "1")} {
		listen(reg, subj, func(m *nats.Msg) { learned.add(m.Reply) })
	}
	for _, in := range []*intruder{reg, gw2} {
		if err := in.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if !constellation.WaitFor(10*time.Second, func() bool { return reg.violations.Load()-before >= 3 }) {
		t.Errorf("the shm-registry's wide subscriptions were not all refused (%d refusals)", reg.violations.Load()-before)
	}

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	var attempts atomic.Int64
	attackers.Go(func() {
		prefixes := map[string]uint64{} // gateway inbox prefixes learned, "<InboxPrefix>.<nuid>.", and the highest inbox number seen
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case r := <-learned.ch:
				attempts.Add(1)
				// Answer it, from both roles, and cancel it as a gateway
				// would without the request's key.
				if forge {
					_ = reg.nc.Publish(r, forged)
					_ = gw2.nc.Publish(r, forged)
				}
				for _, body := range []string{r, r + " 1", r + " 0"} {
					_ = gw2.nc.Publish(bus.CancelSubject, []byte(body))
				}
				if p, n, ok := inboxPrefix(r); ok && forge {
					prefixes[p] = max(prefixes[p], n)
				}
			case <-tick.C:
				// Inbox numbers count up: answer the neighbours of every
				// learned one, on the subjects the registry's role may
				// publish to and on those it may not.
				for p, seen := range prefixes {
					for n := max(seen, 50) - 50; n <= seen+400; n++ {
						tok := strconv.FormatUint(n, 36)
						_ = reg.nc.Publish(p+"shm-registry.0."+tok, forged)
						_ = reg.nc.Publish(p+tok, forged)
					}
					_ = reg.nc.Publish(p+"executor.0.1", forged)
				}
				_ = reg.nc.Flush()
			}
		}
	})

	// The registry learns the gateway's inbox prefix.
	for range 3 {
		resp, err := http.Get(g.HTTP() + "/v2/systemsharedmemory/status")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}

	const clients = 24
	type result struct {
		status int
		body   string
		err    error
	}
	results := make([]result, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			in := make([]int, 16)
			for j := range in {
				in[j] = i*100 + j
			}
			body, _ := json.Marshal(map[string]any{"inputs": []any{
				map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{16}, "data": in},
			}})
			hc := &http.Client{Timeout: 90 * time.Second}
			resp, err := hc.Post(g.HTTP()+"/v2/models/slow/infer", "application/json", bytes.NewReader(body))
			if err != nil {
				results[i] = result{err: err}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			results[i] = result{status: resp.StatusCode, body: string(b)}
			if resp.StatusCode != http.StatusOK {
				return
			}
			var out struct {
				Outputs []struct {
					Name string `json:"name"`
					Data []int  `json:"data"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(b, &out); err != nil || len(out.Outputs) != 1 || fmt.Sprint(out.Outputs[0].Data) != fmt.Sprint(in) {
				results[i].err = fmt.Errorf("outputs %s, want %v", b, in)
			}
		})
	}
	wg.Wait()
	close(stop)
	attackers.Wait()

	failed := 0
	for i, r := range results {
		switch {
		case r.err != nil:
			failed++
			t.Errorf("client %d: %v", i, r.err)
		case r.status != http.StatusOK:
			failed++
			t.Errorf("client %d: HTTP %d %s", i, r.status, r.body)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d clients got a forged answer or failed", failed, clients)
	}
	if n := probeLeaks.Load(); n > 0 {
		t.Errorf("%d liveness probes showed a reply subject to every role", n)
	}
	if attempts.Load() == 0 {
		t.Error("the intruders learnt no reply subject at all: the attack did not run")
	}
	if !forge {
		t.Logf("reply subjects learnt and cancelled %d", attempts.Load())
		return
	}
	refused := forgedMetric(t, g.Metrics())
	if refused == 0 {
		t.Errorf("the gateway counted no forged reply (nereid_bus_forged_replies), though the registry answered its in-flight requests' inbox numbers")
	}
	if reg.violations.Load() == 0 || gw2.violations.Load() == 0 {
		t.Errorf("publishing into the executors' class of a gateway's inbox was not refused (registry %d, gateway %d refusals)",
			reg.violations.Load(), gw2.violations.Load())
	}
	t.Logf("reply subjects learnt %d, forged replies refused by the gateway %v, refusals by NATS: registry %d, gateway %d",
		attempts.Load(), refused, reg.violations.Load(), gw2.violations.Load())
}

// inboxPrefix is "<InboxPrefix(gateway)>.<nuid>." of a gateway's reply
// subject, and the inbox number that ends it.
func inboxPrefix(reply string) (string, uint64, bool) {
	rest, ok := strings.CutPrefix(reply, bus.InboxPrefix(bus.RoleGateway)+".")
	if !ok {
		return "", 0, false
	}
	nuid, _, ok := strings.Cut(rest, ".")
	if !ok {
		return "", 0, false
	}
	n, err := strconv.ParseUint(reply[strings.LastIndexByte(reply, '.')+1:], 36, 64)
	if err != nil {
		return "", 0, false
	}
	return bus.InboxPrefix(bus.RoleGateway) + "." + nuid + ".", n, true
}

// forgedMetric reads nereid_bus_forged_replies from a /metrics endpoint.
func forgedMetric(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "nereid_bus_forged_replies "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("nereid_bus_forged_replies %q: %v", v, err)
			}
			return f
		}
	}
	t.Fatalf("no nereid_bus_forged_replies in %s", url)
	return 0
}
