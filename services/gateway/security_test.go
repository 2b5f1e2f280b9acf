package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	health "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/internal/testutil/tlstest"
	"github.com/nereid-io/nereid/pkg/tlsreload"
)

// tlsGateway runs a gateway serving HTTPS and gRPC over TLS from certs.
func tlsGateway(t *testing.T, certFile, keyFile, root string, mutual bool) *Gateway {
	t.Helper()
	files := &tlsreload.Files{Cert: certFile, Key: keyFile, CA: root, Mutual: mutual}
	return startGateway(t, startNATS(t), func(c *Config) { c.HTTPTLS, c.GRPCTLS = files, files })
}

func clientTLS(t *testing.T, roots *x509.CertPool, cert *tlstest.Leaf) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		kp, err := cert.TLS()
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c
}

// httpsLive GETs /v2/health/live over a fresh connection.
func httpsLive(g *Gateway, c *tls.Config) error {
	tr := &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + g.HTTPAddr() + "/v2/health/live")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.StatusCode, "status"}
	}
	return nil
}

// grpcLive calls ServerLive over a fresh connection.
func grpcLive(g *Gateway, c *tls.Config) error {
	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = inference.NewGRPCInferenceServiceClient(cc).ServerLive(ctx, &inference.ServerLiveRequest{})
	return err
}

func TestTLS(t *testing.T) {
	set := tlstest.MustSet(t)
	other, err := tlstest.NewCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	g := tlsGateway(t, set.ServerCert, set.ServerKey, "", false)

	expired := tlstest.MustIssue(t, set.CA, tlstest.Options{Kind: tlstest.Server, Expired: true})
	ec, ek, err := expired.Write(t.TempDir(), "expired")
	if err != nil {
		t.Fatal(err)
	}
	gExpired := tlsGateway(t, ec, ek, "", false)
	wrongHost := tlstest.MustIssue(t, set.CA, tlstest.Options{Kind: tlstest.Server, Hosts: []string{"elsewhere.example"}})
	wc, wk, err := wrongHost.Write(t.TempDir(), "wrong-host")
	if err != nil {
		t.Fatal(err)
	}
	gWrongHost := tlsGateway(t, wc, wk, "", false)

	for _, c := range []struct {
		name    string
		g       *Gateway
		roots   *x509.CertPool
		wantErr string
	}{
		{"trusted", g, set.CA.Pool(), ""},
		{"unknown CA", g, other.Pool(), "unknown authority"},
		{"expired server certificate", gExpired, set.CA.Pool(), "expired"},
		{"certificate for another host", gWrongHost, set.CA.Pool(), "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for proto, call := range map[string]func(*Gateway, *tls.Config) error{"https": httpsLive, "grpc": grpcLive} {
				err := call(c.g, clientTLS(t, c.roots, nil))
				switch {
				case c.wantErr == "" && err != nil:
					t.Errorf("%s: %v", proto, err)
				case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
					t.Errorf("%s: got %v, want an error mentioning %q", proto, err, c.wantErr)
				}
			}
		})
	}

	// A plain-text client gets nothing from a TLS port.
	resp, err := http.Get("http://" + g.HTTPAddr() + "/v2/health/live")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP request to the HTTPS port succeeded")
		}
	}
}

func TestMutualTLS(t *testing.T) {
	set := tlstest.MustSet(t)
	other, err := tlstest.NewCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	g := tlsGateway(t, set.ServerCert, set.ServerKey, set.CAFile, true)
	for _, c := range []struct {
		name string
		cert *tlstest.Leaf
		ok   bool
	}{
		{"client certificate", set.Client, true},
		{"no client certificate", nil, false},
		{"client certificate from another CA", tlstest.MustIssue(t, other, tlstest.Options{Kind: tlstest.Client}), false},
		{"expired client certificate", tlstest.MustIssue(t, set.CA, tlstest.Options{Kind: tlstest.Client, Expired: true}), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for proto, call := range map[string]func(*Gateway, *tls.Config) error{"https": httpsLive, "grpc": grpcLive} {
				err := call(g, clientTLS(t, set.CA.Pool(), c.cert))
				if c.ok && err != nil {
					t.Errorf("%s: %v", proto, err)
				}
				if !c.ok && err == nil {
					t.Errorf("%s: refused client got through", proto)
				}
			}
		})
	}
}

// peerSerial dials addr and returns the serial of the certificate served.
func peerSerial(t *testing.T, addr string, roots *x509.CertPool, client *tlstest.Leaf) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, clientTLS(t, roots, client))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestCertificateRotation replaces the files under a running gateway (as a
// Secret update does): the open stream keeps working, new connections get
// the new certificate.
func TestCertificateRotation(t *testing.T) {
	set := tlstest.MustSet(t)
	g := tlsGateway(t, set.ServerCert, set.ServerKey, set.CAFile, true)
	ctls := clientTLS(t, set.CA.Pool(), set.Client)

	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(ctls)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := inference.NewGRPCInferenceServiceClient(cc).ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(what string) {
		t.Helper()
		if err := stream.Send(&inference.ModelInferRequest{ModelName: "no-such-model", Id: what}); err != nil {
			t.Fatalf("%s: send: %v", what, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: recv: %v", what, err)
		}
		if resp.GetErrorMessage() == "" {
			t.Fatalf("%s: want the unknown model's error in the stream, got %v", what, resp)
		}
	}
	roundTrip("before")
	if got, want := peerSerial(t, g.GRPCAddr(), set.CA.Pool(), set.Client), set.Server.Serial.String(); got != want {
		t.Fatalf("serving serial %s, want %s", got, want)
	}

	next := tlstest.MustIssue(t, set.CA, tlstest.Options{Kind: tlstest.Server})
	if err := tlstest.WriteFile(set.ServerCert, next.CertPEM); err != nil {
		t.Fatal(err)
	}
	if err := tlstest.WriteFile(set.ServerKey, next.KeyPEM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for peerSerial(t, g.GRPCAddr(), set.CA.Pool(), set.Client) != next.Serial.String() {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate is not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := peerSerial(t, g.HTTPAddr(), set.CA.Pool(), set.Client); got != next.Serial.String() {
		t.Errorf("HTTPS serves serial %s after rotation, want %s", got, next.Serial)
	}
	roundTrip("after")
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}
}

func TestRestrictionParse(t *testing.T) {
	for _, c := range []struct {
		spec, err string
	}{
		{"inference:k=v", ""},
		{"health,metadata:key=va:l=ue", ""},
		{"inference", "want <api list>:<header>=<value>"},
		{"inference:novalue", "want <api list>:<header>=<value>"},
		{":k=v", "want <api list>:<header>=<value>"},
		{"inference:k=", `the value of header "k" is empty`},
		{"everything:k=v", `unknown API "everything"`},
	} {
		err := Restrictions{}.Add(c.spec)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Add(%q) = %v, want %q", c.spec, err, c.err)
		}
	}
	rs := Restrictions{}
	if err := rs.Add("inference:k=secret"); err != nil {
		t.Fatal(err)
	}
	err := rs.Add("health,inference:k2=other-secret")
	if err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("a group restricted twice: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "secret") {
		t.Errorf("error shows the secret: %v", err)
	}
	var f RestrictionFlag
	if err := f.Set("health:k=topsecret"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(f.String(), "topsecret") {
		t.Errorf("flag prints its secret: %q", f.String())
	}
}

func TestHTTPAPIGroup(t *testing.T) {
	for path, want := range map[string]APIGroup{
		"/v2":                                    APIMetadata,
		"/v2/health/live":                        APIHealth,
		"/v2/health/ready":                       APIHealth,
		"/v2/models/m":                           APIMetadata,
		"/v2/models/m/versions/1":                APIMetadata,
		"/v2/models/m/ready":                     APIHealth,
		"/v2/models/m/versions/1/ready":          APIHealth,
		"/v2/models/m/config":                    APIModelConfig,
		"/v2/models/m/stats":                     APIStatistics,
		"/v2/models/stats":                       APIStatistics,
		"/v2/models/m/infer":                     APIInference,
		"/v2/models/m/versions/2/infer":          APIInference,
		"/v2/models/m/generate":                  APIInference,
		"/v2/models/m/generate_stream":           APIInference,
		"/v2/models/m/trace/setting":             APITrace,
		"/v2/trace/setting":                      APITrace,
		"/v2/logging":                            APILogging,
		"/v2/repository/index":                   APIModelRepository,
		"/v2/repository/models/m/load":           APIModelRepository,
		"/v2/systemsharedmemory/status":          APISharedMemory,
		"/v2/cudasharedmemory/region/r/register": APISharedMemory,
		"/v2/nothing":                            "",
		"/metrics":                               "",
	} {
		if got := httpAPIGroup(path); got != want {
			t.Errorf("httpAPIGroup(%q) = %q, want %q", path, got, want)
		}
	}
}

// restrictedCall is one request of a group, over HTTP and over gRPC.
type restrictedCall struct {
	group        APIGroup
	method, path string
	body         string
	rpc          func(ctx context.Context, c inference.GRPCInferenceServiceClient, h health.HealthClient) error
	// adminRPC, for the admin group, calls the admin API, whose HTTP and
	// gRPC endpoints have ports of their own.
	adminRPC func(ctx context.Context, c adminv1.AdminClient) error
}

func restrictedCalls() []restrictedCall {
	return []restrictedCall{
		{APIHealth, "GET", "/v2/health/live", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.ServerLive(ctx, &inference.ServerLiveRequest{})
			return err
		}, nil},
		{APIHealth, "GET", "/v2/models/m/ready", "", func(ctx context.Context, _ inference.GRPCInferenceServiceClient, h health.HealthClient) error {
			_, err := h.Check(ctx, &health.HealthCheckRequest{})
			return err
		}, nil},
		{APIMetadata, "GET", "/v2", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.ServerMetadata(ctx, &inference.ServerMetadataRequest{})
			return err
		}, nil},
		{APIInference, "POST", "/v2/models/m/infer", "{}", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "m"})
			return err
		}, nil},
		{APIInference, "POST", "/v2/models/m/versions/1/infer", "{}", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			s, err := c.ModelStreamInfer(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&inference.ModelInferRequest{ModelName: "m"}); err != nil && err != io.EOF {
				return err
			}
			_, err = s.Recv()
			return err
		}, nil},
		{APISharedMemory, "GET", "/v2/systemsharedmemory/status", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.SystemSharedMemoryStatus(ctx, &inference.SystemSharedMemoryStatusRequest{})
			return err
		}, nil},
		{APISharedMemory, "GET", "/v2/cudasharedmemory/status", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.CudaSharedMemoryStatus(ctx, &inference.CudaSharedMemoryStatusRequest{})
			return err
		}, nil},
		{APIModelConfig, "GET", "/v2/models/m/config", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "m"})
			return err
		}, nil},
		{APIModelRepository, "POST", "/v2/repository/index", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
			return err
		}, nil},
		{APIStatistics, "GET", "/v2/models/stats", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{})
			return err
		}, nil},
		{APITrace, "GET", "/v2/trace/setting", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.TraceSetting(ctx, &inference.TraceSettingRequest{})
			return err
		}, nil},
		{APILogging, "GET", "/v2/logging", "", func(ctx context.Context, c inference.GRPCInferenceServiceClient, _ health.HealthClient) error {
			_, err := c.LogSettings(ctx, &inference.LogSettingsRequest{})
			return err
		}, nil},
		{group: APIAdmin, method: "GET", path: "/v1/admin/gateways", adminRPC: func(ctx context.Context, c adminv1.AdminClient) error {
			_, err := c.ListGateways(ctx, &adminv1.ListGatewaysRequest{})
			return err
		}},
		{group: APIAdmin, method: "POST", path: "/v1/admin/executors/nobody/drain", body: "{}", adminRPC: func(ctx context.Context, c adminv1.AdminClient) error {
			_, err := c.DrainExecutor(ctx, &adminv1.DrainExecutorRequest{ExecutorId: "nobody"})
			return err
		}},
	}
}

func TestRestrictedAPIs(t *testing.T) {
	// Two restrictions with different keys, covering every group.
	rs := Restrictions{}
	if err := rs.Add("health,metadata,inference,shared-memory,model-config:infer-key=infer-value"); err != nil {
		t.Fatal(err)
	}
	if err := rs.Add("model-repository,statistics,trace,logging,admin:admin-key=admin-value"); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, startNATS(t), func(c *Config) {
		c.HTTPRestricted, c.GRPCRestricted = rs, rs
		c.AdminAddr, c.AdminHTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	})
	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ic, hc := inference.NewGRPCInferenceServiceClient(cc), health.NewHealthClient(cc)
	acc, err := grpc.NewClient(g.AdminAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer acc.Close()
	ac := adminv1.NewAdminClient(acc)

	covered := map[APIGroup]bool{}
	for _, c := range restrictedCalls() {
		covered[c.group] = true
		rule := rs[c.group]
		t.Run(string(c.group)+" "+c.path, func(t *testing.T) {
			for _, h := range []struct {
				name, key, value string
				allowed          bool
			}{
				{"without header", "", "", false},
				{"with a wrong value", rule.Header, "guess", false},
				{"with the other group's header", otherHeader(rule.Header), "infer-value", false},
				{"with header", rule.Header, rule.Value, true},
			} {
				// HTTP
				base := "http://" + g.HTTPAddr()
				if c.adminRPC != nil {
					base = "http://" + g.AdminHTTPAddr()
				}
				req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
				if err != nil {
					t.Fatal(err)
				}
				if h.key != "" {
					req.Header.Set(h.key, h.value)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				wantMsg := `{"error":"This API is restricted, expecting header '` + rule.Header + `'"}`
				if h.allowed {
					if resp.StatusCode == http.StatusForbidden {
						t.Errorf("HTTP %s: refused: %s", h.name, body)
					}
				} else if resp.StatusCode != http.StatusForbidden || string(body) != wantMsg {
					t.Errorf("HTTP %s: %d %s, want 403 %s", h.name, resp.StatusCode, body, wantMsg)
				}

				// gRPC
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if h.key != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "triton-grpc-protocol-"+h.key, h.value)
				}
				if c.adminRPC != nil {
					err = c.adminRPC(ctx, ac)
				} else {
					err = c.rpc(ctx, ic, hc)
				}
				cancel()
				st := status.Convert(err)
				restricted := st.Code() == codes.Unavailable && st.Message() == "This protocol is restricted, expecting header 'triton-grpc-protocol-"+rule.Header+"'"
				if h.allowed == restricted {
					t.Errorf("gRPC %s: %v (restricted=%v, want %v)", h.name, err, restricted, !h.allowed)
				}
			}
		})
	}
	for _, grp := range APIGroups() {
		if !covered[grp] {
			t.Errorf("group %s has no restricted call in the test", grp)
		}
	}
}

func otherHeader(h string) string {
	if h == "infer-key" {
		return "admin-key"
	}
	return "infer-key"
}

// FuzzRestrictionSpec feeds --http-restricted-api/--grpc-restricted-protocol
// values to the parser: no panic, a restriction only for known groups with
// a header, and never the value in an error.
func FuzzRestrictionSpec(f *testing.F) {
	for _, s := range []string{"inference:k=v", "health,metadata:key=va:l=ue", ":=", "a,b,c", "inference:=v", "health,health:k=v", "inference:k="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		rs := Restrictions{}
		err := rs.Add(spec)
		if err != nil {
			// The value is what follows the first '='; the error may show
			// what precedes it, nothing of the value.
			if before, value, ok := strings.Cut(spec, "="); ok && len(value) > 3 && !strings.Contains(before, value) &&
				strings.Contains(strings.ReplaceAll(err.Error(), before, ""), value) {
				t.Fatalf("error %q shows the value of %q", err, spec)
			}
			return
		}
		known := map[APIGroup]bool{}
		for _, g := range APIGroups() {
			known[g] = true
		}
		for g, r := range rs {
			if !known[g] || r.Header == "" {
				t.Fatalf("%q gave restriction %q -> %+v", spec, g, r)
			}
		}
	})
}

// FuzzHTTPAPIGroup classifies any path without panicking, and only into
// Triton's groups.
func FuzzHTTPAPIGroup(f *testing.F) {
	for _, p := range []string{"/v2", "/v2/models/m/versions/1/infer", "/v2/models//", "/v2/models/m/versions", "/v2/models/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		g := httpAPIGroup(path)
		if g == "" {
			return
		}
		for _, k := range APIGroups() {
			if g == k {
				return
			}
		}
		t.Fatalf("httpAPIGroup(%q) = %q", path, g)
	})
}
