package bench

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
)

func TestRecorderPercentile(t *testing.T) {
	r := NewRecorder(0)
	for i := 100; i >= 1; i-- { // out of order on purpose
		r.Add(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{0, 1 * time.Microsecond},
		{1, 1 * time.Microsecond},
		{50, 50 * time.Microsecond},
		{99, 99 * time.Microsecond},
		{99.5, 100 * time.Microsecond},
		{100, 100 * time.Microsecond},
	} {
		if got := r.Percentile(tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got, want := r.Mean(), 50500*time.Nanosecond; got != want {
		t.Errorf("mean = %v, want %v", got, want)
	}
	if got := NewRecorder(0).Percentile(50); got != 0 {
		t.Errorf("empty p50 = %v, want 0", got)
	}
}

// counting is a worker whose op counts calls and fails on call failAt.
func counting(calls *atomic.Int64, failAt int64) Worker {
	return func(int) (Op, func(), error) {
		return func(bool) error {
			if calls.Add(1) == failAt {
				return errors.New("boom")
			}
			return nil
		}, nil, nil
	}
}

func TestDrive(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, conc   int
		warmup    int
		failAt    int64
		wantErr   bool
		wantCalls int64
	}{
		{"c1", 100, 1, 2, 0, false, 102},
		{"c16", 1000, 16, 1, 0, false, 1016},
		{"fails in warm-up", 100, 4, 2, 3, true, -1},
		{"fails timed", 100, 4, 2, 50, true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			res, err := Drive(nil, tc.n, tc.conc, tc.warmup, counting(&calls, tc.failAt))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if res.N != tc.n || res.Conc != tc.conc || res.PerSec <= 0 || res.P50 > res.P99 || res.P99 > res.Max {
				t.Errorf("result %v", res)
			}
			if got := calls.Load(); got != tc.wantCalls {
				t.Errorf("%d calls, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestDrivePair(t *testing.T) {
	var a, b atomic.Int64
	ra, rb, err := DrivePair(nil, 1000, 4, 1, counting(&a, 0), counting(&b, 0))
	if err != nil {
		t.Fatal(err)
	}
	if ra.N != 1000 || rb.N != 1000 || a.Load() != 1004 || b.Load() != 1004 {
		t.Errorf("a: %v (%d calls), b: %v (%d calls)", ra, a.Load(), rb, b.Load())
	}
	var c atomic.Int64
	if _, _, err := DrivePair(nil, 1000, 4, 1, counting(&a, 0), counting(&c, 500)); err == nil {
		t.Error("a failing second path gave no error")
	}
}

// TestBaselines sends one checked request down every baseline path, so a
// broken baseline shows in make test, not only in make bench.
func TestBaselines(t *testing.T) {
	bs := fx.baselines(t)
	payload := FP32Payload(small)
	binBody, binHeader := HTTPBinaryRequest(payload)
	jsonBody, jsonHeader := HTTPJSONRequest(payload)
	req := InferRequest(payload)
	chain := inference.NewGRPCInferenceServiceClient(fx.conn(t, bs.ChainGRPCAddr))
	for _, tc := range []struct {
		name string
		w    Worker
	}{
		{"grpc-echo-unary", GRPCEchoUnary(fx.conn(t, bs.GRPCEchoAddr), payload)},
		{"grpc-echo-stream", GRPCEchoStream(fx.conn(t, bs.GRPCEchoAddr), payload)},
		{"http-echo", HTTPPost(fx.httpClient(), "http://"+bs.HTTPEchoAddr+"/", nil, payload, EchoCheck(payload))},
		{"nats-tcp", NATSRequest(bs.NATSTCP, SubjectEchoTCP, payload)},
		{"nats-inproc", NATSRequest(bs.NATSInproc, SubjectEchoInproc, payload)},
		{"chain-grpc-unary", InferUnary(chain, req)},
		{"chain-grpc-stream", InferStream(chain, req)},
		{"routed-chain-grpc-unary", InferUnary(inference.NewGRPCInferenceServiceClient(fx.conn(t, bs.RoutedGRPCAddr)), req)},
		{"chain-http-binary", HTTPPost(fx.httpClient(), "http://"+bs.ChainHTTPAddr+InferPath, binHeader, binBody, EchoCheck(binBody))},
		{"protocol-chain-http-binary", HTTPPost(fx.httpClient(), "http://"+bs.ProtocolHTTPAddr+InferPath, binHeader, binBody, BinaryInferCheck(payload))},
		{"protocol-chain-http-json", HTTPPost(fx.httpClient(), "http://"+bs.ProtocolHTTPAddr+InferPath, jsonHeader, jsonBody, JSONInferCheck(payload))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Drive(nil, 3, 2, 1, tc.w); err != nil {
				t.Fatal(err)
			}
		})
	}
}
