package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/handoff"
)

// natsBytes is what the NATS server has received so far.
func natsBytes(t *testing.T, ns *server.Server) int64 {
	t.Helper()
	v, err := ns.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	return v.InBytes
}

// handoffFiles lists this process's hand-off files in /dev/shm.
func handoffFiles() []string {
	m, _ := filepath.Glob(filepath.Join(handoff.Dir, "nereid-handoff-"+strconv.Itoa(os.Getpid())+"-*"))
	return m
}

func bigClient(t *testing.T, g *Gateway) inference.GRPCInferenceServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return inference.NewGRPCInferenceServiceClient(cc)
}

// TestLargeTensorRoutes sends 8 MiB identity requests over HTTP binary, gRPC
// and a gRPC stream along every route the gateway can pick: handed over as
// slices (executor in this process), through /dev/shm files (executor on
// this node), and chunked over the bus (hand-off off); all come back intact
// and no hand-off file is left behind.
func TestLargeTensorRoutes(t *testing.T) {
	ns := startNATS(t)
	startExecutor(t, ns, "ex1")
	const n = 2 << 20 // FP32 elements: 8 MiB
	data := make([]byte, 4*n)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	for _, tc := range []struct {
		name  string
		route handoff.Route
		cfg   func(*Config)
	}{
		{"process", handoff.RouteProcess, nil},
		{"node", handoff.RouteNode, nil},
		{"bus", handoff.RouteBus, func(c *Config) { c.HandoffThreshold = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg == nil {
				r := tc.route
				routeForTest = &r
				defer func() { routeForTest = nil }()
			}
			var mut []func(*Config)
			if tc.cfg != nil {
				mut = append(mut, tc.cfg)
			}
			g := startGateway(t, ns, mut...)
			waitModelReady(t, g, "identity_fp32")
			before := natsBytes(t, ns)

			header := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],"parameters":{"binary_data_size":%d}}],`+
				`"parameters":{"binary_data_output":true}}`, n, len(data))
			r := do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/identity_fp32/infer", append([]byte(header), data...),
				map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(header))})
			if r.status != 200 {
				t.Fatalf("HTTP: %d %s", r.status, r.body[:min(len(r.body), 300)])
			}
			hl, _ := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
			if hl <= 0 || !bytes.Equal(r.body[hl:], data) || r.header.Get("Content-Type") != "application/octet-stream" {
				t.Fatalf("HTTP: output differs (header %d, body %d)", hl, len(r.body))
			}

			client := bigClient(t, g)
			req := &inference.ModelInferRequest{ModelName: "identity_fp32", Id: "big",
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, n}}},
				RawInputContents: [][]byte{data}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := client.ModelInfer(ctx, req)
			if err != nil {
				t.Fatalf("gRPC: %v", err)
			}
			if resp.GetId() != "big" || len(resp.GetRawOutputContents()) != 1 || !bytes.Equal(resp.GetRawOutputContents()[0], data) {
				t.Fatal("gRPC: output differs")
			}

			stream, err := client.ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				req.Id = "s" + strconv.Itoa(i)
				if err := stream.Send(req); err != nil {
					t.Fatal(err)
				}
			}
			_ = stream.CloseSend()
			for i := range 2 {
				out, err := stream.Recv()
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				if out.GetErrorMessage() != "" || out.GetInferResponse().GetId() != "s"+strconv.Itoa(i) ||
					!bytes.Equal(out.GetInferResponse().GetRawOutputContents()[0], data) {
					t.Fatalf("stream response %d: %q id %q", i, out.GetErrorMessage(), out.GetInferResponse().GetId())
				}
			}
			if _, err := stream.Recv(); err != io.EOF {
				t.Fatalf("stream end: %v", err)
			}
			waitFor(t, "hand-off files to go", 5*time.Second, func() bool { return len(handoffFiles()) == 0 })
			// 4 requests of 8 MiB each way: the bus carries them all, or
			// almost nothing of them.
			moved := natsBytes(t, ns) - before
			if busRoute := tc.route == handoff.RouteBus; busRoute != (moved > 8*int64(len(data))) || !busRoute && moved > 1<<20 {
				t.Fatalf("the bus carried %d bytes on route %s", moved, tc.route)
			}
			t.Logf("route %s: %d bytes over NATS", tc.route, moved)
			// nereid_handoff_bytes counts what went around the bus.
			m := do(t, "GET", "http://"+g.MetricsAddr()+"/metrics", nil, nil)
			mode := map[handoff.Route]string{handoff.RouteProcess: "process", handoff.RouteNode: "file"}[tc.route]
			for _, dir := range []string{"request", "response"} {
				line := fmt.Sprintf(`nereid_handoff_bytes{direction=%q,mode=%q} %s`, dir, mode, strconv.FormatFloat(float64(4*len(data)), 'g', -1, 64))
				if tc.route != handoff.RouteBus && !strings.Contains(string(m.body), line+"\n") {
					t.Errorf("metrics lack %q:\n%s", line, m.body)
				}
			}
			if tc.route == handoff.RouteBus && strings.Contains(string(m.body), "nereid_handoff_bytes{") {
				t.Errorf("hand-off bytes counted on the bus route:\n%s", m.body)
			}
		})
	}
}

// TestLargeRequestRefused: a large gRPC request refused before it is
// forwarded (unknown model) leaves no hand-off file behind.
func TestLargeRequestRefused(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	client := bigClient(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "nope",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{8 << 20}}},
		RawInputContents: [][]byte{make([]byte, 8<<20)}})
	if err == nil {
		t.Fatal("unknown model accepted")
	}
	if f := handoffFiles(); len(f) > 0 {
		t.Fatalf("left in /dev/shm: %v", f)
	}
}

// TestHandoffFallsBackToTheBus: an executor that claims the gateway's node
// but does not take requests on the node's subject (it does not share the
// node's /dev/shm, or went away) does not make large requests fail: they
// go over the bus, inputs put back.
func TestHandoffFallsBackToTheBus(t *testing.T) {
	ns := startNATS(t)
	// The fake executor reports node "test" and serves only the model's
	// subject, not the node's.
	g := startGateway(t, ns, func(c *Config) { c.Node = "test"; c.HandoffThreshold = 16 })
	ex := newFakeExecutor(t, ns, "ex1",
		&busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")})
	ex.start()
	waitModelReady(t, g, "simple")
	r := do(t, "POST", "http://"+g.HTTPAddr()+"/v2/models/simple/infer", []byte(simpleRequestJSON("")), nil)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var out struct {
		Outputs []struct {
			Data []int `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || len(out.Outputs) != 2 ||
		!slices.Equal(out.Outputs[0].Data, sum) || !slices.Equal(out.Outputs[1].Data, diff) {
		t.Fatalf("%s: %v", r.body, err)
	}
	waitFor(t, "hand-off files to go", 5*time.Second, func() bool { return len(handoffFiles()) == 0 })
}
