package gateway

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/adminv1"
)

func TestPresenceTable(t *testing.T) {
	var p presenceTable[*adminv1.Gateway]
	t0 := time.Unix(100, 0)
	p.put("b", &adminv1.Gateway{Id: "b"}, false, t0)
	p.put("a", &adminv1.Gateway{Id: "a"}, false, t0.Add(2*time.Second))
	p.put("", &adminv1.Gateway{}, false, t0) // no id: ignored
	ids := func(now time.Time) []string {
		var out []string
		for _, g := range p.list(now, 3*time.Second) {
			out = append(out, g.GetId())
		}
		return out
	}
	if got := ids(t0.Add(3 * time.Second)); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("got %v, want [a b] in id order", got)
	}
	// b is not heard from past the expiry; a withdraws.
	if got := ids(t0.Add(4 * time.Second)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("got %v, want [a]", got)
	}
	p.put("a", &adminv1.Gateway{Id: "a"}, true, t0.Add(4*time.Second))
	if got := ids(t0.Add(4 * time.Second)); len(got) != 0 {
		t.Fatalf("got %v after the withdrawal", got)
	}
}

func TestAdminGroupRestricts(t *testing.T) {
	if g := httpAPIGroup("/v1/admin/executors"); g != APIAdmin {
		t.Fatalf("REST admin path in group %q", g)
	}
	rs := Restrictions{}
	if err := rs.Add("admin:admin-key=secret"); err != nil {
		t.Fatal(err)
	}
	err := grpcRestricted(rs, nil, "/nereid.admin.v1.Admin/DrainExecutor")
	if err == nil || err.Error() != "rpc error: code = Unavailable desc = This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'" {
		t.Fatalf("got %v", err)
	}
	if err := grpcRestricted(rs, nil, "/inference.GRPCInferenceService/ModelInfer"); err != nil {
		t.Fatalf("inference restricted by the admin group: %v", err)
	}
}
