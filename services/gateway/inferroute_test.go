package gateway

import (
	"net/http"
	"net/url"
	"testing"
)

// muxInferRoute is what the mux does with a POST to p: whether it routes
// it, as it is, to the infer handler, and the model and version it reads.
func muxInferRoute(t testing.TB, mux *http.ServeMux, p string) (model, version string, ok bool) {
	u, err := url.ParseRequestURI(p)
	if err != nil {
		return "", "", false
	}
	r := &http.Request{Method: http.MethodPost, URL: u, Host: "localhost"}
	_, pattern := mux.Handler(r)
	if pattern != patternModel && pattern != patternModelVersion {
		return "", "", false
	}
	// The values the mux gives the handler, from the same patterns alone.
	values := http.NewServeMux()
	kind, digits := "", false
	for _, pat := range []string{patternModel, patternModelVersion} {
		values.HandleFunc(pat, func(w http.ResponseWriter, r *http.Request) {
			model, kind = r.PathValue("model"), r.PathValue("kind")
			version, digits = pathVersion(r)
		})
	}
	rec := &discardWriter{header: http.Header{}}
	values.ServeHTTP(rec, r)
	if rec.status != 0 || kind != "infer" || !digits { // a redirect to the cleaned path, another kind, a version the route refuses
		return "", "", false
	}
	return model, version, true
}

type discardWriter struct {
	header http.Header
	status int
}

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(status int)      { d.status = status }

func TestInferRouteAgreesWithMux(t *testing.T) {
	mux := new(Gateway).httpMux()
	for _, tc := range []struct {
		path           string
		model, version string
		ok             bool
	}{
		{"/v2/models/simple/infer", "simple", "", true},
		{"/v2/models/simple/versions/1/infer", "simple", "1", true},
		{"/v2/models/simple/versions/0012/infer", "simple", "0012", true},
		{"/v2/models/my-model_v2.onnx~x/infer", "my-model_v2.onnx~x", "", true},
		{"/v2/models/versions/infer", "versions", "", true},
		{"/v2/models/stats/infer", "stats", "", true},
		{"/v2/models/versions/versions/3/infer", "versions", "3", true},
		{"/v2/models/infer/infer", "infer", "", true},
		{"/v2/models/simple/versions/x/infer", "", "", false},
		{"/v2/models/simple/versions//infer", "", "", false},
		{"/v2/models//infer", "", "", false},
		{"/v2/models/./infer", "", "", false},
		{"/v2/models/../infer", "", "", false},
		{"/v2/models/a/../b/infer", "", "", false},
		{"/v2/models/a%20b/infer", "", "", false},
		{"/v2/models/a b/infer", "", "", false},
		{"/v2/models/simple/infer/", "", "", false},
		{"/v2/models/simple/ready", "", "", false},
		{"/v2/models/simple/trace/infer", "", "", false},
		{"/v2/models/infer", "", "", false},
		{"/v2//models/simple/infer", "", "", false},
		{"/v2/models/simple/versions/1/2/infer", "", "", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			model, version, ok := inferRoute(tc.path)
			if model != tc.model || version != tc.version || ok != tc.ok {
				t.Fatalf("inferRoute(%q) = %q, %q, %v; want %q, %q, %v", tc.path, model, version, ok, tc.model, tc.version, tc.ok)
			}
			if !ok {
				return
			}
			mm, mv, mok := muxInferRoute(t, mux, tc.path)
			if !mok || mm != model || mv != version {
				t.Fatalf("the mux routes %q to the infer handler: %v, model %q, version %q; inferRoute: %q, %q", tc.path, mok, mm, mv, model, version)
			}
		})
	}
}

// FuzzInferRoute checks that whatever inferRoute takes, the mux would have
// routed to the infer handler with the same model and version.
func FuzzInferRoute(f *testing.F) {
	for _, p := range []string{"/v2/models/simple/infer", "/v2/models/simple/versions/1/infer", "/v2/models/./infer", "/v2/models/a/versions/b/infer"} {
		f.Add(p)
	}
	mux := new(Gateway).httpMux()
	f.Fuzz(func(t *testing.T, p string) {
		model, version, ok := inferRoute(p)
		if !ok {
			return
		}
		mm, mv, mok := muxInferRoute(t, mux, p)
		if !mok || mm != model || mv != version {
			t.Fatalf("inferRoute(%q) = %q, %q; the mux: %v, %q, %q", p, model, version, mok, mm, mv)
		}
	})
}
