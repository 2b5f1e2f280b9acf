package gateway

import (
	"testing"

	"github.com/nereid-io/nereid/api/inference"
)

// TestReruns: a request lost with its executor runs again where the
// model's backend cannot take an executor down (Go), not where it can
// (a Triton C backend: the request may be what crashed it), unless the
// model's rerun_on_executor_loss says otherwise.
func TestReruns(t *testing.T) {
	param := func(v string) *inference.ModelConfig {
		if v == "" {
			return &inference.ModelConfig{Name: "m"}
		}
		return &inference.ModelConfig{Name: "m", Parameters: map[string]*inference.ModelParameter{"rerun_on_executor_loss": {StringValue: v}}}
	}
	for _, tc := range []struct {
		name   string
		param  string
		native bool
		want   bool
	}{
		{"Go backend", "", false, true},
		{"C backend", "", true, false},
		{"C backend, opted in", "true", true, true},
		{"Go backend, opted out", "false", false, false},
		{"C backend, opted out", "false", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vv := &versionView{config: param(tc.param), native: tc.native}
			if got := reruns(vv); got != tc.want {
				t.Fatalf("reruns = %v, want %v", got, tc.want)
			}
			g := &Gateway{cfg: Config{LostRequestReruns: 2}}
			if n := g.rerunsOf(vv); (n == 2) != tc.want || (n != 0 && n != 2) {
				t.Fatalf("rerunsOf = %d, want %v", n, tc.want)
			}
		})
	}
}
