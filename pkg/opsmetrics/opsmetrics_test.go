package opsmetrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

// Requests over a real NATS server show in the round-trip histogram by
// subject kind, served at /metrics on a port of its own, followed by what
// the caller adds; two registries in one process stay apart.
func TestRoundTripServed(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	connect := func(opts ...bus.Option) *bus.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := bus.New(nc, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	reg, other := New(), New()
	server := connect()
	if _, err := server.Handle(bus.ExecutorStatsSubject("e1"), "", func(context.Context, []byte) (proto.Message, error) {
		return &busv1.StatisticsReply{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	client := connect(reg.BusOption())
	ctx := context.Background()
	for range 3 {
		if err := client.Request(ctx, bus.ExecutorStatsSubject("e1"), &busv1.StatisticsRequest{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Request(ctx, bus.InferSubject("nobody", "1"), &busv1.StatisticsRequest{}, nil); err == nil {
		t.Fatal("a request nobody serves succeeded")
	}

	srv, err := Listen("127.0.0.1:0", reg.Handler(func(w http.ResponseWriter) { io.WriteString(w, "backend_metric 7\n") }))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	body := get(t, "http://"+srv.Addr()+"/metrics")
	for _, want := range []string{
		`nereid_nats_round_trip_seconds_count{kind="executor_stats"} 3`,
		`nereid_nats_round_trip_seconds_count{kind="infer"} 1`,
		"# TYPE nereid_nats_round_trip_seconds histogram",
		"backend_metric 7\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	if r, err := http.Get("http://" + srv.Addr() + "/other"); err != nil || r.StatusCode != 404 {
		t.Errorf("GET /other: %v %v, want 404", r, err)
	}

	osrv, err := Listen("127.0.0.1:0", other.Handler(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer osrv.Close()
	if body := get(t, "http://"+osrv.Addr()+"/metrics"); strings.Contains(body, "_count") {
		t.Errorf("a second registry shows the first's round trips:\n%s", body)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, r.StatusCode, err)
	}
	return string(b)
}
