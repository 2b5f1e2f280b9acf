package gateway

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/internal/testutil/tlstest"
	"github.com/nereid-io/nereid/pkg/tlsreload"
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

// The admin API is served over the gateway's TLS settings: gRPC with the
// gRPC endpoint's (mutual here), REST with the HTTP endpoint's.
func TestAdminTLS(t *testing.T) {
	set := tlstest.MustSet(t)
	files := &tlsreload.Files{Cert: set.ServerCert, Key: set.ServerKey, CA: set.CAFile, Mutual: true}
	g := startGateway(t, startNATS(t), func(c *Config) {
		c.HTTPTLS, c.GRPCTLS = files, files
		c.AdminAddr, c.AdminHTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	})
	list := func(c *tls.Config) error {
		creds := insecure.NewCredentials()
		if c != nil {
			creds = credentials.NewTLS(c)
		}
		cc, err := grpc.NewClient(g.AdminAddr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := adminv1.NewAdminClient(cc).ListGateways(ctx, &adminv1.ListGatewaysRequest{})
		if err == nil && (len(r.GetGateways()) != 1 || r.GetGateways()[0].GetAdminAddress() != g.AdminAddr()) {
			t.Errorf("gateways %v", r.GetGateways())
		}
		return err
	}
	if err := list(clientTLS(t, set.CA.Pool(), set.Client)); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if err := list(clientTLS(t, set.CA.Pool(), nil)); err == nil {
		t.Error("gRPC without a client certificate was served")
	}
	if err := list(nil); err == nil {
		t.Error("plain-text gRPC was served")
	}
	get := func(c *tls.Config) (int, error) {
		tr := &http.Transport{TLSClientConfig: c}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + g.AdminHTTPAddr() + "/v1/admin/gateways")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(clientTLS(t, set.CA.Pool(), set.Client)); err != nil || code != http.StatusOK {
		t.Fatalf("REST with a client certificate: %d %v", code, err)
	}
	if _, err := get(clientTLS(t, set.CA.Pool(), nil)); err == nil {
		t.Error("REST without a client certificate was served")
	}
}
