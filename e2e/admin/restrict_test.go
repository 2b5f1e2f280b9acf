package admin

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/adminv1"
)

// The admin API restricted like Triton's API groups (group "admin"):
// calls without the header are refused with Triton's status and message
// over gRPC and REST, calls with it are served, and the other groups are
// not affected. Bad requests get errors naming what is wrong.
func TestRestrictedAndBadRequests(t *testing.T) {
	e := start(t, []string{"exec-a"},
		"--grpc-restricted-protocol", "admin:admin-key=open-sesame",
		"--http-restricted-api", "admin:admin-key=open-sesame")
	allowed := func(c context.Context) context.Context {
		return metadata.AppendToOutgoingContext(c, "triton-grpc-protocol-admin-key", "open-sesame")
	}
	const grpcMsg = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"

	for _, call := range []struct {
		name string
		rpc  func(context.Context) error
	}{
		{"ListExecutors", func(c context.Context) error {
			_, err := e.admin.ListExecutors(c, &adminv1.ListExecutorsRequest{})
			return err
		}},
		{"DrainExecutor", func(c context.Context) error {
			_, err := e.admin.DrainExecutor(c, &adminv1.DrainExecutorRequest{ExecutorId: "exec-a"})
			return err
		}},
	} {
		err := call.rpc(ctx(t))
		if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != grpcMsg {
			t.Errorf("%s without the header: %v, want Unavailable %q", call.name, err, grpcMsg)
		}
		wrong := metadata.AppendToOutgoingContext(ctx(t), "triton-grpc-protocol-admin-key", "guess")
		if st := status.Convert(call.rpc(wrong)); st.Code() != codes.Unavailable {
			t.Errorf("%s with a wrong value: %v", call.name, st)
		}
	}
	// The gateway is up once it is live; the executor may join later.
	waitFor(t, "exec-a listed", func() bool {
		r, err := e.admin.ListExecutors(allowed(ctx(t)), &adminv1.ListExecutorsRequest{})
		return err == nil && len(r.GetExecutors()) == 1 && r.GetExecutors()[0].GetId() == "exec-a"
	})
	// Refused before it reached the executor: it still serves.
	if st, err := e.admin.GetDrainStatus(allowed(ctx(t)), &adminv1.GetDrainStatusRequest{ExecutorId: "exec-a"}); err != nil ||
		st.GetState() != adminv1.DrainState_DRAIN_STATE_SERVING {
		t.Fatalf("drain status with the header: %v %v", st, err)
	}

	// REST: Triton's 403 and message without the header.
	var refusal struct {
		Error string `json:"error"`
	}
	if code := getJSON(t, e.adminURL+"/v1/admin/executors", nil, &refusal); code != http.StatusForbidden ||
		refusal.Error != "This API is restricted, expecting header 'admin-key'" {
		t.Fatalf("REST without the header: %d %q", code, refusal.Error)
	}
	if code := doJSON(t, "POST", e.adminURL+"/v1/admin/executors/exec-a/drain", nil, []byte("{}"), &refusal); code != http.StatusForbidden {
		t.Fatalf("REST drain without the header: %d", code)
	}
	var list struct {
		Executors []struct {
			ID string `json:"id"`
		} `json:"executors"`
	}
	if code := getJSON(t, e.adminURL+"/v1/admin/executors", http.Header{"Admin-Key": {"open-sesame"}}, &list); code != 200 ||
		len(list.Executors) != 1 || list.Executors[0].ID != "exec-a" {
		t.Fatalf("REST with the header: %d %+v", code, list)
	}
	// Inference is not in the admin group.
	e.simple(t, 1)

	// Bad requests: an unknown executor, no executor at all.
	_, err := e.admin.DrainExecutor(allowed(ctx(t)), &adminv1.DrainExecutorRequest{ExecutorId: "no-such-executor"})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "no executor 'no-such-executor' in the constellation" {
		t.Errorf("drain of an unknown executor: %v", err)
	}
	_, err = e.admin.GetDrainStatus(allowed(ctx(t)), &adminv1.GetDrainStatusRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "executor_id is required" {
		t.Errorf("drain status without an executor: %v", err)
	}
	var rpcErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if code := doJSON(t, "POST", e.adminURL+"/v1/admin/executors/no-such-executor/drain", http.Header{"Admin-Key": {"open-sesame"}}, []byte("{}"), &rpcErr); code != http.StatusNotFound ||
		rpcErr.Message != "no executor 'no-such-executor' in the constellation" {
		t.Errorf("REST drain of an unknown executor: %d %+v", code, rpcErr)
	}

	// nereidctl: refused without --restricted, served with it.
	out, err := exec.Command(e.c.Bin.Path("nereidctl"), "--addr", e.adminRPC, "executors").CombinedOutput()
	if err == nil || !strings.Contains(string(out), grpcMsg) {
		t.Errorf("nereidctl without the restriction: %v\n%s", err, out)
	}
	out, err = exec.Command(e.c.Bin.Path("nereidctl"), "--addr", e.adminRPC, "--restricted", "admin-key=open-sesame", "executors").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exec-a") || !strings.Contains(string(out), "simple/1") || !strings.Contains(string(out), "serving") {
		t.Errorf("nereidctl executors: %v\n%s", err, out)
	}
	out, err = exec.Command(e.c.Bin.Path("nereidctl"), "--addr", e.adminRPC, "--restricted", "admin-key=open-sesame", "drain-status", "exec-a").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "executor exec-a: serving" {
		t.Errorf("nereidctl drain-status: %v\n%s", err, out)
	}
}
