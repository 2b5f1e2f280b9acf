package bus

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// subjectExamples holds one subject made by every exported subject builder
// and constant of this package. TestEverySubjectHasARoute fails when a new
// one is added here without a route, or added to the package without an
// example here.
var subjectExamples = map[string]string{
	"HeartbeatSubject":               HeartbeatSubject,
	"SolicitSubject":                 SolicitSubject,
	"CancelSubject":                  CancelSubject,
	"AliveSubject":                   AliveSubject,
	"ModelControlSubject":            ModelControlSubject,
	"LoadedModelsSubject":            LoadedModelsSubject,
	"InferSubject":                   InferSubject("simple.onnx", "1"),
	"InferNodeSubject":               InferNodeSubject("simple", "", "node-a"),
	"InferDeviceSubject":             InferDeviceSubject("simple", "2", "node-a", 3),
	"ExecutorCatalogSubject":         ExecutorCatalogSubject("e1"),
	"ExecutorStatsSubject":           ExecutorStatsSubject("e1"),
	"GatewayStatsSubject":            GatewayStatsSubject,
	"ExecutorStatusSubject":          ExecutorStatusSubject("e1"),
	"ExecutorDrainSubject":           ExecutorDrainSubject("e1"),
	"ExecutorPlaceSubject":           ExecutorPlaceSubject("e1"),
	"ExecutorEnsembleSubject":        ExecutorEnsembleSubject("e1"),
	"PlacementSubject":               PlacementSubject,
	"PlacementStateSubject":          PlacementStateSubject,
	"PlacementPinSubject":            PlacementPinSubject,
	"PlacementControlSubject":        PlacementControlSubject,
	"GatewayPresenceSubject":         GatewayPresenceSubject,
	"ResponseCacheInvalidateSubject": ResponseCacheInvalidateSubject,
	"RouterPresenceSubject":          RouterPresenceSubject,
	"PingSubject":                    PingSubject("shm-registry"),
	"SequenceInferWildcard":          SequenceInferWildcard,
	"SequencePullWildcard":           SequencePullWildcard,
	"SequenceClaimWildcard":          SequenceClaimWildcard,
	"SequenceTakeoverWildcard":       SequenceTakeoverWildcard,
	"SequenceClaimSubject":           SequenceClaimSubject("seq", "1"),
	"SequenceTakeoverSubject":        SequenceTakeoverSubject("seq", "1"),
	"SequenceStatsWildcard":          SequenceStatsWildcard,
	"SequenceStatsSubject":           SequenceStatsSubject("seq", "1"),
	"SequenceInferSubject":           SequenceInferSubject("seq", ""),
	"SequencePullSubject":            SequencePullSubject("seq", "1"),
	"ShmRegisterSubject":             ShmRegisterSubject,
	"ShmUnregisterSubject":           ShmUnregisterSubject,
	"ShmStatusSubject":               ShmStatusSubject,
	"ShmAcquireSubject":              ShmAcquireSubject,
	"ShmReleaseSubject":              ShmReleaseSubject,
	"ShmRemovedSubject":              ShmRemovedSubject("node-a"),
	"ShmCudaSubject":                 ShmCudaSubject("node-a", 0),
	"SettingsSubject":                SettingsSubject(SettingsTrace),
	"SettingsSyncSubject":            SettingsSyncSubject(SettingsLogging),
	"ServerMetadataSubject":          ServerMetadataSubject,
	"ModelMetadataSubject":           ModelMetadataSubject,
	"ModelConfigSubject":             ModelConfigSubject,
	"ModelStatisticsSubject":         ModelStatisticsSubject,
	"RepositoryIndexSubject":         RepositoryIndexSubject,
}

// exportedSubjectNames lists the exported functions, constants and
// variables of this package's sources whose names end in Subject or
// Wildcard: every subject the wire format has.
func exportedSubjectNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		keep := func(id *ast.Ident) {
			if id.IsExported() && !strings.HasPrefix(id.Name, "Parse") && (strings.HasSuffix(id.Name, "Subject") || strings.HasSuffix(id.Name, "Wildcard")) {
				names = append(names, id.Name)
			}
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					keep(d.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok {
						for _, n := range vs.Names {
							keep(n)
						}
					}
				}
			}
		}
	}
	return names
}

func TestEverySubjectHasARoute(t *testing.T) {
	names := exportedSubjectNames(t)
	if len(names) < len(subjectExamples) {
		t.Fatalf("found %d subject names in the sources, want at least %d: %v", len(names), len(subjectExamples), names)
	}
	for _, n := range names {
		if _, ok := subjectExamples[n]; !ok {
			t.Errorf("%s builds a subject but has no example in subjectExamples: add one, and a route in permissions.go", n)
		}
	}
	for name, subj := range subjectExamples {
		var matched []Route
		for _, r := range routes {
			if subjectMatches(r.Pattern, subj) {
				matched = append(matched, r)
			}
		}
		if len(matched) == 0 {
			t.Errorf("%s = %q is under no route: no role may use it", name, subj)
			continue
		}
		for _, r := range matched {
			if len(r.Subscribers) == 0 {
				t.Errorf("route %s has no subscriber", r.Pattern)
			}
		}
	}
}

// subjectMatches reports whether pattern (with * and >) matches subject, as
// NATS matches them; a wildcard subject matches a pattern covering it.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) {
			return false
		}
		if tok != "*" && tok != s[i] {
			return false
		}
		if tok == "*" && s[i] == ">" {
			return false
		}
	}
	return len(p) == len(s)
}

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.*.c", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
	} {
		if got := subjectMatches(c.p, c.s); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

// natsAuthPaths are the shipped copies of the authorization: compose's and
// the Helm chart's.
var natsAuthPaths = []string{"../../deploy/docker/nats-auth.conf", "../../charts/nereid/files/nats-auth.conf"}

const natsAuthHeader = `# Generated from pkg/bus (routes in permissions.go) by its tests:
#   NEREID_UPDATE_DEPLOY=1 go test ./pkg/bus -run TestNATSAuthConfigFresh
# Do not edit by hand. Each service role is one user allowed only the
# subjects it uses; passwords come from the environment variables named.

`

// TestNATSAuthConfigFresh keeps the shipped NATS authorization equal to what
// the routes derive, so the deployment and the code cannot drift apart.
func TestNATSAuthConfigFresh(t *testing.T) {
	want := natsAuthHeader + NATSAuthorization()
	for _, path := range natsAuthPaths {
		if os.Getenv("NEREID_UPDATE_DEPLOY") != "" {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is stale: run NEREID_UPDATE_DEPLOY=1 go test ./pkg/bus -run TestNATSAuthConfigFresh", path)
		}
	}
}

func TestRolePermissions(t *testing.T) {
	ex := RolePermissions(RoleExecutor)
	for _, s := range ex.Subscribe {
		if strings.HasPrefix(s, "_INBOX.") && s != "_INBOX.executor.>" {
			t.Errorf("executor may subscribe to another role's inbox: %s", s)
		}
		if s == ">" || s == "_INBOX.>" {
			t.Errorf("executor has a blanket subscription: %s", s)
		}
	}
	for _, s := range append(ex.Publish, ex.Subscribe...) {
		if subjectMatches(s, ShmRegisterSubject) || subjectMatches(s, SequenceInferSubject("m", "1")) {
			t.Errorf("executor may use %s", s)
		}
	}
}

// startAuthServer runs nats-server in process from the shipped configuration
// (deploy/docker/nats.conf with its include), on a random port, with the
// role passwords in the environment as a deployment provides them.
func startAuthServer(t *testing.T) (*server.Server, map[Role]string) {
	t.Helper()
	pw := map[Role]string{}
	for _, r := range Roles() {
		pw[r] = "pw-" + string(r) + "-" + nats.NewInbox()[7:]
		t.Setenv(PasswordEnv(r), pw[r])
	}
	opts, err := server.ProcessConfigFile("../../deploy/docker/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.StoreDir = t.TempDir() // JetStream's, a volume in deployments
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s, pw
}

// permissionErrors connects as role and collects the server's asynchronous
// permission violations.
func connectAs(t *testing.T, s *server.Server, r Role, password string) (*nats.Conn, chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(string(r), password), nats.CustomInboxPrefix(InboxPrefix(r)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func expectViolation(t *testing.T, errs chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("%s: got %v, want a permissions violation", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no permissions violation from the server", what)
	}
}

func TestShippedNATSConfigEnforcesRoles(t *testing.T) {
	s, pw := startAuthServer(t)

	t.Run("no credentials", func(t *testing.T) {
		_, err := nats.Connect(s.ClientURL())
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Fatalf("connect without credentials: %v, want an authorization violation", err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		_, err := nats.Connect(s.ClientURL(), nats.UserInfo(string(RoleGateway), "nope"))
		if err == nil {
			t.Fatal("connected with a wrong password")
		}
	})

	exec, exErrs := connectAs(t, s, RoleExecutor, pw[RoleExecutor])
	for _, subj := range []string{ShmRegisterSubject, ShmUnregisterSubject, SequenceInferSubject("m", "1"), SequenceTakeoverSubject("m", "1"), ShmRemovedSubject("n")} {
		if err := exec.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := exec.Flush(); err != nil {
			t.Fatal(err)
		}
		expectViolation(t, exErrs, "executor publishing on "+subj)
	}
	for _, subj := range []string{InboxPrefix(RoleGateway) + ".>", "_INBOX.>", ShmRegisterSubject, InferSubject("m", "1") + ".>"} {
		if _, err := exec.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		if err := exec.Flush(); err != nil {
			t.Fatal(err)
		}
		expectViolation(t, exErrs, "executor subscribing to "+subj)
	}

	// What the roles do use goes through: a gateway's request reaches an
	// executor, whose reply reaches the gateway's inbox.
	exBus, err := New(exec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exBus.Close() })
	if _, err := exBus.Handle(InferSubject("m", "1"), QueueExecutors, func(context.Context, []byte) (proto.Message, error) {
		return wrapperspb.Bytes([]byte("ok")), nil
	}); err != nil {
		t.Fatal(err)
	}
	gwc, gwErrs := connectAs(t, s, RoleGateway, pw[RoleGateway])
	gwBus, err := New(gwc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gwBus.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out wrapperspb.BytesValue
	if err := gwBus.Request(ctx, InferSubject("m", "1"), wrapperspb.Bytes([]byte("q")), &out); err != nil {
		t.Fatalf("gateway -> executor request: %v", err)
	}
	if string(out.Value) != "ok" {
		t.Fatalf("reply %q", out.Value)
	}
	select {
	case err := <-gwErrs:
		t.Fatalf("gateway: %v", err)
	case err := <-exErrs:
		t.Fatalf("executor: %v", err)
	default:
	}

	// Nobody but an executor may answer in a gateway's inference inbox,
	// nor reach the old flat inboxes.
	reg, regErrs := connectAs(t, s, RoleShmRegistry, pw[RoleShmRegistry])
	for _, c := range []struct {
		nc   *nats.Conn
		errs chan error
		who  string
	}{{reg, regErrs, "shm-registry"}, {gwc, gwErrs, "gateway"}} {
		for _, subj := range []string{
			InboxPrefix(RoleGateway) + ".abc.executor.x.1",
			InboxPrefix(RoleGateway) + ".abc.executor_sequence-router.x.1",
			InboxPrefix(RoleExecutor) + ".abc.executor.x.1",
			InboxPrefix(RoleGateway) + ".abc.1",
		} {
			if err := c.nc.Publish(subj, []byte("forged")); err != nil {
				t.Fatal(err)
			}
			if err := c.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			expectViolation(t, c.errs, c.who+" publishing on "+subj)
		}
	}
}
