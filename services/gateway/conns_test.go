package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/fdlimit"
)

func TestShedIdle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s ...int) []time.Time {
		var ts []time.Time
		for _, v := range s {
			ts = append(ts, t0.Add(time.Duration(v)*time.Second))
		}
		return ts
	}
	for _, tc := range []struct {
		name            string
		open, threshold int
		idle            []time.Time
		want            []int
	}{
		{"below the threshold", 99, 100, at(1, 2, 3), nil},
		{"off", 1000, 0, at(1, 2, 3), nil},
		{"nothing idle", 150, 100, nil, nil},
		// At 100 of 100: down to 95 (the margin, 5%), five closed.
		{"at the threshold: the oldest, by the margin", 100, 100, at(9, 3, 7, 1, 8, 2, 6, 5, 4, 10), []int{3, 5, 1, 8, 7}},
		{"above it, more than are idle: all, oldest first", 120, 100, at(5, 1, 3), []int{1, 2, 0}},
		{"a small threshold sheds one at least", 10, 10, at(2, 1), []int{1}},
		{"past a small threshold", 11, 10, at(2, 1, 3), []int{1, 0}},
		{"threshold 1", 1, 1, at(3, 1, 2), []int{1}},
		{"equal idle times keep their order", 100, 100, at(1, 1, 1, 1, 1, 1, 1), []int{0, 1, 2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shedIdle(tc.open, tc.threshold, tc.idle); !slices.Equal(got, tc.want) {
				t.Fatalf("shedIdle(%d, %d) = %v, want %v", tc.open, tc.threshold, got, tc.want)
			}
		})
	}
}

// keptAlive is a client HTTP/1.1 connection kept open between requests.
type keptAlive struct {
	net.Conn
	r *bufio.Reader
}

func dialKeptAlive(t *testing.T, addr string) *keptAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keptAlive{Conn: c, r: bufio.NewReader(c)}
}

// live asks for /v2/health/live on the connection and reads the answer.
func (k *keptAlive) live() error {
	_ = k.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(k, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// closed reports whether the server closed the connection.
func (k *keptAlive) closed() bool {
	_ = k.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := k.r.ReadByte()
	return err == io.EOF
}

// TestShedIdleHTTP: with the open descriptors at the threshold, a new
// client is served and the oldest idle connections are closed to make
// room, newer ones kept; the shedding is counted.
func TestShedIdleHTTP(t *testing.T) {
	ns := startNATS(t)
	open, err := fdlimit.Open()
	if err != nil {
		t.Skip("open descriptors cannot be counted here:", err)
	}
	// The gateway's own descriptors, then a few dozen connections (each
	// two descriptors in this process: the client's and the server's).
	threshold := open + 60
	g := startGateway(t, ns, func(c *Config) { c.Limits.ShedIdleAt = threshold })
	shed := g.conns.closed.WithLabelValues("http", "fd_limit")

	var conns []*keptAlive
	for len(conns) < 200 && testutil.ToFloat64(shed) == 0 {
		k := dialKeptAlive(t, g.HTTPAddr())
		if err := k.live(); err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		conns = append(conns, k)
		time.Sleep(10 * time.Millisecond) // idle by the next one, and the count resampled now and then
	}
	n := testutil.ToFloat64(shed)
	if n == 0 {
		t.Fatalf("%d connections open, threshold %d descriptors: none shed", len(conns), threshold)
	}
	t.Logf("%d connections, threshold %d descriptors: %v shed", len(conns), threshold, n)
	if !conns[0].closed() {
		t.Fatal("the oldest idle connection is still open")
	}
	if err := conns[len(conns)-1].live(); err != nil {
		t.Fatalf("the newest connection, which was served: %v", err)
	}
	if err := dialKeptAlive(t, g.HTTPAddr()).live(); err != nil {
		t.Fatalf("a new client: %v", err)
	}
}

// closeSignal is a client connection that says when it is closed.
type closeSignal struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeSignal) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// dialSignalling dials gRPC connections that report their closing on the
// returned channel's values, one per connection dialed.
func dialSignalling(t *testing.T, addr string) (*grpc.ClientConn, chan *closeSignal) {
	t.Helper()
	dialed := make(chan *closeSignal, 10)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err != nil {
				return nil, err
			}
			s := &closeSignal{Conn: c, closed: make(chan struct{})}
			dialed <- s
			return s, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, dialed
}

// TestShedIdleGRPC: near the threshold, a gRPC connection with no call
// open is shed like an idle HTTP one (the oldest first), while one with a
// call open, older still, is kept and its call goes on.
func TestShedIdleGRPC(t *testing.T) {
	ns := startNATS(t)
	open, err := fdlimit.Open()
	if err != nil {
		t.Skip("open descriptors cannot be counted here:", err)
	}
	threshold := open + 60
	g := startGateway(t, ns, func(c *Config) { c.Limits.ShedIdleAt = threshold })
	simpleServing(t, ns, g) // its client connection: idle, and older than those below
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	busyCC, _ := dialSignalling(t, g.GRPCAddr())
	st, err := inference.NewGRPCInferenceServiceClient(busyCC).ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(simpleRequest()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	idleCC, dialed := dialSignalling(t, g.GRPCAddr())
	if _, err := inference.NewGRPCInferenceServiceClient(idleCC).ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil {
		t.Fatal(err)
	}
	idle := <-dialed

	shed := g.conns.closed.WithLabelValues("grpc", "fd_limit")
	for i := 0; i < 200 && testutil.ToFloat64(shed) < 2; i++ {
		if err := dialKeptAlive(t, g.HTTPAddr()).live(); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := testutil.ToFloat64(shed); n < 2 {
		t.Fatalf("%v idle gRPC connections shed, want 2", n)
	}
	select {
	case <-idle.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle gRPC connection is still open")
	}
	// The busy one's call goes on.
	if err := st.Send(simpleRequest()); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.ErrorMessage != "" {
		t.Fatalf("the call kept open: %v %v", err, r.GetErrorMessage())
	}
	// The shed connection's client reconnects on its next call.
	if _, err := inference.NewGRPCInferenceServiceClient(idleCC).ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil {
		t.Fatalf("a call after the shedding: %v", err)
	}
}
