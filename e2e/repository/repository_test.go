// Package repository holds the end-to-end tests of the model repository:
// version policies, and models that fail to load showing their error in the
// repository index while the others serve.
package repository

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

type indexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

func TestRepositoryIndexAndVersionPolicies(t *testing.T) {
	// Models that fail to load are listed, not fatal: tritonserver's
	// --exit-on-error=false.
	g := constellation.Standalone(t, "testdata/model_repository", "--exit-on-error", "false")
	base := g.HTTP()

	status, body := constellation.Call(t, http.MethodPost, base+"/v2/repository/index", "")
	if status != 200 {
		t.Fatalf("index = %d %s", status, body)
	}
	var index []indexEntry
	if err := json.Unmarshal(body, &index); err != nil {
		t.Fatalf("index is not a JSON array of entries: %v\n%s", err, body)
	}
	got := map[string]indexEntry{}
	for _, e := range index {
		got[e.Name+"/"+e.Version] = e
	}
	want := []struct {
		key, state, reason string
	}{
		{"identity_int32/1", "READY", ""},
		{"identity_int32/3", "READY", ""},
		{"latest_two/2", "READY", ""},
		{"latest_two/3", "READY", ""},
		{"bad_dims/", "UNAVAILABLE", "model input 'INPUT0' dimension must be integer >= 1, or -1 to indicate a variable-size dimension"},
		{"no_backend/1", "UNAVAILABLE", "tensorrt_llm_nonexistent"},
	}
	for _, w := range want {
		e, ok := got[w.key]
		if !ok {
			t.Errorf("index has no entry %s: %s", w.key, body)
			continue
		}
		if e.State != w.state || !strings.Contains(e.Reason, w.reason) {
			t.Errorf("%s = %+v, want state %s reason containing %q", w.key, e, w.state, w.reason)
		}
	}
	if _, ok := got["latest_two/1"]; ok {
		t.Errorf("latest_two version 1 is outside the policy latest{2} but is listed")
	}

	if bytes.Contains(body, []byte(`\u003e`)) {
		t.Errorf("index escapes '>' as \\u003e: %s", body)
	}

	// {"ready": true} lists only what serves.
	_, body = constellation.Call(t, http.MethodPost, base+"/v2/repository/index", `{"ready": true}`)
	if bytes.Contains(body, []byte("bad_dims")) || !bytes.Contains(body, []byte("latest_two")) {
		t.Errorf("ready index = %s", body)
	}

	// Failed models are not ready and refuse inference; the others serve.
	if status, _ := constellation.Call(t, http.MethodGet, base+"/v2/models/bad_dims/ready", ""); status != 400 {
		t.Errorf("bad_dims ready = %d, want 400", status)
	}
	if status, b := constellation.Call(t, http.MethodPost, base+"/v2/models/no_backend/infer", `{"inputs":[]}`); status == 200 {
		t.Errorf("infer on a model that failed to load = %d %s", status, b)
	}
	for _, v := range []string{"1", "3"} {
		status, b := constellation.Call(t, http.MethodPost, base+"/v2/models/identity_int32/versions/"+v+"/infer",
			`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[4],"data":[1,2,3,4]}]}`)
		if status != 200 || !bytes.Contains(b, []byte(`"model_version":"`+v+`"`)) {
			t.Errorf("infer identity_int32 version %s = %d %s", v, status, b)
		}
	}
	// Without a version the latest ready one answers.
	status, b := constellation.Call(t, http.MethodPost, base+"/v2/models/latest_two/infer",
		`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[4],"data":[1,2,3,4]}]}`)
	if status != 200 || !bytes.Contains(b, []byte(`"model_version":"3"`)) {
		t.Errorf("infer latest_two = %d %s", status, b)
	}
	if status, b := constellation.Call(t, http.MethodPost, base+"/v2/models/latest_two/versions/1/infer",
		`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[4],"data":[1,2,3,4]}]}`); status != 404 {
		t.Errorf("infer latest_two version 1 = %d %s, want 404", status, b)
	}
	if status, _ := constellation.Call(t, http.MethodGet, base+"/v2/health/ready", ""); status != 200 {
		t.Errorf("server not ready with some models failed: %d (non-strict readiness)", status)
	}
}
