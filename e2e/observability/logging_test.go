package observability

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// lineOf returns the output line holding msg.
func lineOf(out, msg string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, msg) {
			return l
		}
	}
	return ""
}

func TestLoggingAcrossConstellation(t *testing.T) {
	c := constellation.NewCluster(t)
	repo := constellation.RepoPath(t, "deploy/model_repository")
	ex1 := c.Executor(repo, "ex-1", "--load-model", "simple")
	gw1 := c.Gateway()
	gw2 := c.Gateway()
	waitReady(t, gw1.HTTP()+"/v2/models/simple/ready")

	_, md := call(t, http.MethodGet, gw1.HTTP()+"/v2", "")
	if exts, _ := md["extensions"].([]any); !slices.Contains(exts, any("logging")) {
		t.Fatalf("server metadata extensions %v lack \"logging\"", exts)
	}
	defaults := map[string]any{"log_file": "", "log_info": true, "log_warning": true, "log_error": true, "log_verbose_level": 0.0, "log_format": "default"}
	if code, got := call(t, http.MethodGet, gw1.HTTP()+"/v2/logging", ""); code != 200 || !reflect.DeepEqual(got, defaults) {
		t.Fatalf("GET defaults: %d %v, want %v", code, got, defaults)
	}
	if l := lineOf(ex1.Output(), "executor ready"); !strings.HasPrefix(l, "I") {
		t.Fatalf("executor's line before the change is not in Triton's default format: %q", l)
	}

	code, got := call(t, http.MethodPost, gw1.HTTP()+"/v2/logging", `{"log_verbose_level":1,"log_format":"json","log_warning":false}`)
	want := map[string]any{"log_file": "", "log_info": true, "log_warning": false, "log_error": true, "log_verbose_level": 1.0, "log_format": "json"}
	if code != 200 || !reflect.DeepEqual(got, want) {
		t.Fatalf("POST: %d %v, want %v", code, got, want)
	}
	// The other gateway follows; over gRPC too.
	g2 := grpcClient(t, gw2.GRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := g2.LogSettings(ctx, &inference.LogSettingsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		s := r.GetSettings()
		if s["log_format"].GetStringParam() == "json" && s["log_verbose_level"].GetUint32Param() == 1 && !s["log_warning"].GetBoolParam() && s["log_info"].GetBoolParam() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second gateway's settings: %v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The executor acknowledged before the POST returned: it now logs JSON.
	ex1.Stop()
	l := lineOf(ex1.Output(), "executor stopped")
	var rec map[string]any
	if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["level"] != "INFO" {
		t.Fatalf("executor's line after the change is not JSON: %q (%v)", l, err)
	}
	// An executor started now starts with the changed settings.
	ex2 := c.Executor(repo, "ex-2", "--load-model", "simple")
	waitReady(t, gw1.HTTP()+"/v2/models/simple/ready")
	deadline = time.Now().Add(20 * time.Second)
	for lineOf(ex2.Output(), "executor ready") == "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if l := lineOf(ex2.Output(), "executor ready"); !strings.HasPrefix(l, "{") {
		t.Fatalf("new executor's line is not JSON: %q", l)
	}

	// So does a shared-memory registry.
	reg := constellation.Start(t, "shm-registry", c.Bin.Path("nereid-shm-registry"), "--nats-url", c.NATSURL)
	deadline = time.Now().Add(20 * time.Second)
	for lineOf(reg.Output(), "ready") == "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if l := lineOf(reg.Output(), "ready"); !strings.HasPrefix(l, "{") {
		t.Fatalf("new registry's line is not JSON: %q", l)
	}

	// Triton's refusals, over both protocols; nothing changes.
	httpCases := []struct {
		body string
		code int
		msg  string
	}{
		{`{"log_file":"/tmp/x"}`, 501, "log file location can not be updated through network protocol"},
		{`{"log_format":"XML"}`, 503, "invalid argument for --log_format, got: XML"},
		{`{"log_info":"yes"}`, 400, "expect boolean for 'log_info'"},
		{`{"log_info":`, 400, "failed to parse the request JSON buffer: unexpected end of JSON input"},
	}
	for _, tc := range httpCases {
		if code, got := call(t, http.MethodPost, gw2.HTTP()+"/v2/logging", tc.body); code != tc.code || got["error"] != tc.msg {
			t.Errorf("POST %s: %d %v, want %d %q", tc.body, code, got, tc.code, tc.msg)
		}
	}
	grpcCases := []struct {
		settings map[string]*inference.LogSettingsRequest_SettingValue
		code     codes.Code
		msg      string
	}{
		{map[string]*inference.LogSettingsRequest_SettingValue{"log_format": {ParameterChoice: &inference.LogSettingsRequest_SettingValue_StringParam{StringParam: "XML"}}},
			codes.InvalidArgument, "invalid argument for log_format, got: XML"},
		{map[string]*inference.LogSettingsRequest_SettingValue{"log_verbose_level": {ParameterChoice: &inference.LogSettingsRequest_SettingValue_BoolParam{BoolParam: true}}},
			codes.InvalidArgument, "expect int32 for 'log_verbose_level'"},
		{map[string]*inference.LogSettingsRequest_SettingValue{"log_error": {ParameterChoice: &inference.LogSettingsRequest_SettingValue_StringParam{StringParam: "on"}}},
			codes.InvalidArgument, "expect boolean for 'log_error'"},
	}
	for _, tc := range grpcCases {
		_, err := g2.LogSettings(ctx, &inference.LogSettingsRequest{Settings: tc.settings})
		if st, _ := status.FromError(err); st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("LogSettings %v: %v, want %v %q", tc.settings, err, tc.code, tc.msg)
		}
	}
	if _, got := call(t, http.MethodGet, gw2.HTTP()+"/v2/logging", ""); !reflect.DeepEqual(got, want) {
		t.Fatalf("after refused changes: %v, want %v", got, want)
	}
}
