package gateway

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		kind    tritonerr.Kind
		message string
	}{
		{in: "", want: latestVersion},
		{in: "1", want: 1},
		{in: "0", want: 0},
		{in: "9223372036854775807", want: 9223372036854775807},
		{in: "abc", kind: tritonerr.InvalidArg, message: "failed to get model version from specified version string 'abc' (details: stol), version should be an integral value > 0"},
		{in: "1abc", kind: tritonerr.InvalidArg, message: "failed to get model version from specified version string '1abc'"},
		{in: "99999999999999999999", kind: tritonerr.InvalidArg, message: "failed to get model version from specified version string '99999999999999999999'"},
		{in: "-1", kind: tritonerr.InvalidArg, message: "invalid model version specified '-1' , version should be an integral value > 0"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseVersion(tc.in)
			if tc.message == "" {
				if err != nil || got != tc.want {
					t.Fatalf("parseVersion(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
				}
				return
			}
			te := tritonerr.From(err)
			if te == nil || te.Kind != tc.kind || !strings.HasPrefix(te.Msg, tc.message) {
				t.Fatalf("parseVersion(%q) error = %v; want %s %q", tc.in, err, tc.kind, tc.message)
			}
		})
	}
}

func TestResponseEncoding(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"", "identity"},
		{"gzip", "gzip"},
		{"deflate", "deflate"},
		{"br", "identity"},
		{"gzip, deflate", "gzip"},
		{"deflate, gzip", "deflate"},
		{"gzip;q=0.5, deflate", "deflate"},
		{"gzip;q=0.5, deflate;q=0.4", "gzip"},
		{"gzip; q=0.8, identity;q=0.9", "identity"},
		{"gzip;q=0", "identity"},
		{"gzip;q=abc, deflate;q=0.1", "deflate"},
		{"*", "identity"},
		{" GZIP ", "gzip"},
	} {
		if got := responseEncoding(tc.header); got != tc.want {
			t.Errorf("responseEncoding(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

func TestRequestEncoding(t *testing.T) {
	for _, tc := range []struct {
		header, want string
		err          bool
	}{
		{"", "identity", false}, {"identity", "identity", false}, {"gzip", "gzip", false},
		{"deflate", "deflate", false}, {"br", "", true}, {"gzip, br", "", true},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Content-Encoding", tc.header)
		}
		got, err := requestEncoding(h)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("requestEncoding(%q) = %q, %v", tc.header, got, err)
		}
		if err != nil && (tritonerr.KindOf(err) != tritonerr.Unsupported || err.Error() != "Unsupported compression type") {
			t.Errorf("requestEncoding(%q) error = %v", tc.header, err)
		}
	}
}

func TestReadBody(t *testing.T) {
	payload := bytes.Repeat([]byte("nereid "), 1000)
	enc := func(w func(io.Writer) io.WriteCloser) []byte {
		var b bytes.Buffer
		zw := w(&b)
		_, _ = zw.Write(payload)
		_ = zw.Close()
		return b.Bytes()
	}
	gz := enc(func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) })
	zl := enc(func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) })
	raw := enc(func(w io.Writer) io.WriteCloser { fw, _ := flate.NewWriter(w, 5); return fw })
	for _, tc := range []struct {
		name, encoding string
		body           []byte
		limit          int64
		wantErr        string
	}{
		{"identity", encIdentity, payload, 1 << 20, ""},
		{"gzip", encGzip, gz, 1 << 20, ""},
		{"deflate zlib", encDeflate, zl, 1 << 20, ""},
		{"deflate raw", encDeflate, raw, 1 << 20, ""},
		{"gzip named deflate", encDeflate, gz, 1 << 20, ""},
		{"bomb", encGzip, gz, 100, "Decompressed data size exceeds the maximum allowed value of 100 bytes. Use --http-max-input-size to increase the limit."},
		{"identity too big", encIdentity, payload, 100, "exceeds the maximum allowed input size"},
		{"corrupt", encGzip, []byte{0x1f, 0x8b, 1, 2, 3}, 1 << 20, "failed to decompress"},
		{"empty compressed", encGzip, nil, 1 << 20, "failed to decompress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readBody(bytes.NewReader(tc.body), tc.encoding, tc.limit, -1)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || tritonerr.KindOf(err) != tritonerr.InvalidArg {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("readBody: %v (len %d)", err, len(got))
			}
		})
	}
}

func TestCompressRoundTrip(t *testing.T) {
	payload := []byte(`{"model_name":"simple"}`)
	for _, enc := range []string{encGzip, encDeflate} {
		c, err := compress(enc, payload)
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader
		if enc == encGzip {
			r, err = gzip.NewReader(bytes.NewReader(c))
		} else {
			r, err = zlib.NewReader(bytes.NewReader(c))
		}
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		if !bytes.Equal(got, payload) {
			t.Fatalf("%s round trip: %q", enc, got)
		}
	}
}

func cfgOf(name string) *inference.ModelConfig {
	return &inference.ModelConfig{Name: name, MaxBatchSize: 8}
}

func TestViewResolve(t *testing.T) {
	c := newCatalog(nil, discardLogger())
	c.execs["a"] = &executorState{id: "a", haveCat: true, models: []*busv1.ModelVersionState{
		{Name: "simple", Version: "1", State: "READY", Config: cfgOf("simple")},
		{Name: "simple", Version: "2", State: "UNAVAILABLE", Reason: "boom"},
		{Name: "multi", Version: "1", State: "READY", Config: cfgOf("multi")},
		{Name: "multi", Version: "3", State: "READY", Config: cfgOf("multi")},
		{Name: "broken", State: "UNAVAILABLE", Reason: "bad config"},
		{Name: "loading", Version: "1", State: "LOADING"},
	}}
	c.execs["b"] = &executorState{id: "b", haveCat: true, models: []*busv1.ModelVersionState{
		{Name: "simple", Version: "2", State: "READY", Config: cfgOf("simple")},
		{Name: "multi", Version: "3", State: "READY", Config: cfgOf("multi")},
	}}
	c.mu.Lock()
	c.publishLocked()
	c.mu.Unlock()
	v := c.current()
	for _, tc := range []struct {
		name    string
		version int64
		want    int64
		kind    tritonerr.Kind
		msg     string
	}{
		{"simple", latestVersion, 2, 0, ""},
		{"simple", 1, 1, 0, ""},
		{"multi", latestVersion, 3, 0, ""},
		{"nope", latestVersion, 0, tritonerr.NotFound, "Request for unknown model: 'nope' is not found"},
		{"simple", 7, 0, tritonerr.NotFound, "Request for unknown model: 'simple' version 7 is not found"},
		{"broken", latestVersion, 0, tritonerr.NotFound, "Request for unknown model: 'broken' has no available versions"},
		{"loading", latestVersion, 0, tritonerr.Unavailable, "Request for unknown model: 'loading' has no available versions"},
		{"loading", 1, 0, tritonerr.Unavailable, "Request for unknown model: 'loading' version 1 is not at ready state"},
	} {
		vv, err := v.resolve(tc.name, tc.version)
		if tc.msg == "" {
			if err != nil || vv.version != tc.want {
				t.Errorf("resolve(%s,%d) = %v, %v", tc.name, tc.version, vv, err)
			}
			continue
		}
		te := tritonerr.From(err)
		if te == nil || te.Kind != tc.kind || te.Msg != tc.msg {
			t.Errorf("resolve(%s,%d) error = %v, want %s %q", tc.name, tc.version, err, tc.kind, tc.msg)
		}
	}
	if got := v.models["multi"].versions[3].executors; len(got) != 2 {
		t.Errorf("multi v3 executors = %v", got)
	}
	if v.serverReady() {
		t.Error("server ready while a model is loading")
	}
	idx := v.index(false)
	want := []indexEntry{
		{"broken", "", "UNAVAILABLE", "bad config"},
		{"loading", "1", "LOADING", ""},
		{"multi", "1", "READY", ""},
		{"multi", "3", "READY", ""},
		{"simple", "1", "READY", ""},
		{"simple", "2", "READY", ""},
	}
	if len(idx) != len(want) {
		t.Fatalf("index = %v", idx)
	}
	for i := range want {
		if idx[i] != want[i] {
			t.Errorf("index[%d] = %v, want %v", i, idx[i], want[i])
		}
	}
	if got := v.index(true); len(got) != 4 {
		t.Errorf("ready index = %v", got)
	}

	// Executor b goes away: simple 2 falls back to a's UNAVAILABLE; when a
	// goes too, every version is remembered as gone.
	c.mu.Lock()
	delete(c.execs, "b")
	c.publishLocked()
	c.mu.Unlock()
	if vv, _ := c.current().resolve("simple", latestVersion); vv == nil || vv.version != 1 {
		t.Errorf("after b left: latest simple = %v", vv)
	}
	c.mu.Lock()
	delete(c.execs, "a")
	c.publishLocked()
	c.mu.Unlock()
	_, err := c.current().resolve("simple", latestVersion)
	if tritonerr.KindOf(err) != tritonerr.Unavailable || !strings.Contains(err.Error(), "model 'simple' has no ready executor") {
		t.Errorf("all gone: %v", err)
	}
	_, err = c.current().resolve("simple", 1)
	if tritonerr.KindOf(err) != tritonerr.Unavailable || !strings.Contains(err.Error(), "model 'simple' has no ready executor") {
		t.Errorf("all gone, version 1: %v", err)
	}
	if c.current().serverReady() {
		t.Error("server ready without executors")
	}
}

func TestAddModelStats(t *testing.T) {
	d := func(c, n uint64) *inference.StatisticDuration { return &inference.StatisticDuration{Count: c, Ns: n} }
	a := &inference.ModelStatistics{Name: "m", Version: "1", LastInference: 10, InferenceCount: 3, ExecutionCount: 2,
		InferenceStats: &inference.InferStatistics{Success: d(3, 300), Queue: d(3, 30)},
		BatchStats:     []*inference.InferBatchStatistics{{BatchSize: 1, ComputeInfer: d(1, 5)}, {BatchSize: 2, ComputeInfer: d(1, 7)}}}
	b := &inference.ModelStatistics{Name: "m", Version: "1", LastInference: 20, InferenceCount: 1, ExecutionCount: 1,
		InferenceStats: &inference.InferStatistics{Success: d(1, 100), Fail: d(2, 2)},
		BatchStats:     []*inference.InferBatchStatistics{{BatchSize: 1, ComputeInfer: d(1, 1)}}}
	s := emptyModelStats(statsKey{"m", "1"})
	addModelStats(s, a)
	addModelStats(s, b)
	if s.LastInference != 20 || s.InferenceCount != 4 || s.ExecutionCount != 3 {
		t.Fatalf("sums: %v", s)
	}
	is := s.InferenceStats
	if is.Success.Count != 4 || is.Success.Ns != 400 || is.Fail.Count != 2 || is.Queue.Ns != 30 || is.CacheHit.Count != 0 {
		t.Fatalf("inference stats: %v", is)
	}
	if len(s.BatchStats) != 2 || s.BatchStats[0].ComputeInfer.Count != 2 || s.BatchStats[0].ComputeInfer.Ns != 6 {
		t.Fatalf("batch stats: %v", s.BatchStats)
	}
}

// A gateway that has just started waits for the constellation's catalog
// (one heartbeat interval, and the fetches then under way) before it calls
// a model unknown or itself ready; a served model is answered as soon as
// its executor's catalog is in.
func TestStartWaitsForCatalog(t *testing.T) {
	ns := startNATS(t)
	ex := newFakeExecutor(t, ns, "ex1", &busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")})
	ex.catalogAsked, ex.catalogGate = make(chan struct{}, 1), make(chan struct{})
	ex.start()
	g := startGateway(t, ns)
	base := "http://" + g.HTTPAddr()
	select {
	case <-ex.catalogAsked:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never asked for the executor's catalog")
	}
	// The catalog is on its way: not ready, and not settled.
	if r := do(t, "GET", base+"/v2/health/ready", nil, nil); r.status != 400 {
		t.Fatalf("ready before the catalog arrived: %d", r.status)
	}
	if g.cat.isSettled() {
		t.Fatal("settled while a catalog fetch is under way")
	}
	close(ex.catalogGate)
	if r := do(t, "POST", base+"/v2/models/simple/infer", []byte(simpleRequestJSON("")), nil); r.status != 200 {
		t.Fatalf("served model right after start: %d %s", r.status, r.body)
	}
	r := do(t, "GET", base+"/v2/models/nosuch", nil, nil)
	if r.status != 404 || !g.cat.isSettled() {
		t.Fatalf("unknown model answered %d (settled: %v); want 404, and only once settled", r.status, g.cat.isSettled())
	}
	if r := do(t, "GET", base+"/v2/health/ready", nil, nil); r.status != 200 {
		t.Fatalf("ready once settled: %d", r.status)
	}
}
