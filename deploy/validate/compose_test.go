package validate

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads docker-compose.yml as `docker compose config` does:
// schema validation, interpolation of ${VAR:-default} from env (never the
// caller's environment, so the test is the same everywhere), merge keys,
// consistency checks (depends_on, volumes) and paths resolved against the
// repository root.
func loadCompose(t *testing.T, env ...string) *types.Project {
	t.Helper()
	return loadComposeFiles(t, []string{"docker-compose.yml"}, env...)
}

// loadComposeFiles loads compose files (relative to the repository root) merged
// in order, as docker compose -f a -f b does.
func loadComposeFiles(t *testing.T, files []string, env ...string) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(root, f)
	}
	opts, err := cli.NewProjectOptions(paths,
		cli.WithWorkingDirectory(root),
		cli.WithEnv(env),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%s does not load: %v", strings.Join(files, " + "), err)
	}
	return p
}

// nereidServices maps each compose service that runs a Nereid image to its
// Dockerfile SERVICE argument.
func nereidServices(t *testing.T, p *types.Project) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		arg := s.Build.Args["SERVICE"]
		if arg == nil || *arg == "" {
			t.Errorf("%s: build without a SERVICE argument", name)
			continue
		}
		out[name] = *arg
	}
	return out
}

// argValue returns the value of --name in args ("--name v" or "--name=v").
func argValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	want := []string{"executor", "gateway", "nats", "redis", "sequence-router", "shm-registry"}
	got := p.ServiceNames()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services = %v, want %v", got, want)
	}
	images := nereidServices(t, p)
	for name, svc := range map[string]string{"gateway": "gateway", "executor": "executor", "shm-registry": "shm-registry", "sequence-router": "sequence-router"} {
		if images[name] != svc {
			t.Errorf("%s builds SERVICE=%q, want %q", name, images[name], svc)
		}
	}
}

func TestComposeFlagsExistInMains(t *testing.T) {
	p := loadCompose(t)
	for name, svc := range nereidServices(t, p) {
		t.Run(name, func(t *testing.T) {
			checkArgs(t, "docker-compose.yml "+name, svc, p.Services[name].Command)
		})
	}
}

func TestComposeImagesBuildFromRepo(t *testing.T) {
	p := loadCompose(t)
	root, _ := filepath.Abs(repoRoot)
	for name := range nereidServices(t, p) {
		b := p.Services[name].Build
		if b.Context != root {
			t.Errorf("%s: build context %q, want the repository root %q (modules build with their replace lines)", name, b.Context, root)
		}
		if _, err := os.Stat(filepath.Join(b.Context, b.Dockerfile)); err != nil {
			t.Errorf("%s: dockerfile: %v", name, err)
		}
		if p.Services[name].Image == "" {
			t.Errorf("%s: no image name: scaled replicas would each build one", name)
		}
	}
}

func TestComposeGatewayPorts(t *testing.T) {
	p := loadCompose(t)
	var got []string
	for _, port := range p.Services["gateway"].Ports {
		got = append(got, port.Published+":"+strconv.FormatUint(uint64(port.Target), 10))
	}
	slices.Sort(got)
	if want := []string{"8000:8000", "8001:8001", "8002:8002", "8003:8003", "8004:8004"}; !slices.Equal(got, want) {
		t.Errorf("gateway ports = %v, want %v (Triton's HTTP, gRPC, metrics; the admin API's gRPC and REST)", got, want)
	}
	for _, port := range p.Services["gateway"].Ports {
		if port.Target >= 8003 && port.HostIP != "127.0.0.1" {
			t.Errorf("admin port %d published on %q: the admin API stays on the host's loopback", port.Target, port.HostIP)
		}
	}
	args := p.Services["gateway"].Command
	for flag, port := range map[string]string{"http-port": "8000", "grpc-port": "8001", "metrics-port": "8002", "admin-port": "8003", "admin-http-port": "8004"} {
		if v, ok := argValue(args, flag); ok && v != port {
			t.Errorf("gateway --%s %s, but compose publishes %s", flag, v, port)
		}
	}
}

func TestComposeBusAndStore(t *testing.T) {
	p := loadCompose(t)
	for name := range nereidServices(t, p) {
		s := p.Services[name]
		for flag, dep := range map[string]string{"nats-url": "nats", "redis-url": "redis"} {
			v, ok := argValue(s.Command, flag)
			if !ok {
				if flag == "nats-url" {
					t.Errorf("%s: no --nats-url; the default (127.0.0.1) is not the nats service", name)
				}
				continue
			}
			u, err := url.Parse(v)
			if err != nil || u.Hostname() != dep {
				t.Errorf("%s: --%s %q does not point at the %s service", name, flag, v, dep)
			}
			if _, ok := s.DependsOn[dep]; !ok {
				t.Errorf("%s: uses %s but does not depend on it", name, dep)
			}
		}
	}
	for _, name := range []string{"shm-registry", "sequence-router", "executor"} {
		if _, ok := argValue(p.Services[name].Command, "redis-url"); !ok {
			t.Errorf("%s: no --redis-url: its state would be lost with the container", name)
		}
	}
	if r := p.Services["redis"]; !slices.Contains(r.Command, "--appendonly") {
		t.Errorf("redis without --appendonly: %v", r.Command)
	}
	conf, err := os.ReadFile(filepath.Join(repoRoot, "deploy/docker/nats.conf"))
	if err != nil || !strings.Contains(string(conf), "max_payload") || !strings.Contains(string(conf), "http_port: 8222") {
		t.Errorf("deploy/docker/nats.conf must raise max_payload and serve monitoring on 8222 (err %v)", err)
	}
}

func TestComposeScaling(t *testing.T) {
	p := loadCompose(t)
	ex := p.Services["executor"]
	if ex.ContainerName != "" || len(ex.Ports) > 0 {
		t.Errorf("executor has container_name %q / ports %v: --scale executor=N would collide", ex.ContainerName, ex.Ports)
	}
	r := p.Services["sequence-router"]
	if r.Deploy == nil || r.Deploy.Replicas == nil || *r.Deploy.Replicas != 2 {
		t.Errorf("sequence-router: want deploy.replicas 2 for failover, got %+v", r.Deploy)
	}
}

func TestComposeSharedMemoryAndModels(t *testing.T) {
	p := loadCompose(t)
	// Regions are node-local files in /dev/shm: gateway and executors must see the same ones.
	for _, name := range []string{"gateway", "executor"} {
		if ipc := p.Services[name].Ipc; ipc != "host" {
			t.Errorf("%s: ipc %q, want host (shared /dev/shm with clients and each other)", name, ipc)
		}
	}
	if v, ok := argValue(p.Services["gateway"].Command, "allow-client-shm"); !ok || v != "true" {
		t.Errorf("gateway: the example runs with --allow-client-shm true, got %q", v)
	}
	// ... and name the same node: the gateway routes a request whose tensors
	// are in /dev/shm to the executors of its own node.
	node := func(name string) string {
		if v, ok := argValue(p.Services[name].Command, "node"); ok {
			return v
		}
		return p.Services[name].Hostname
	}
	if g, e := node("gateway"), node("executor"); g == "" || g != e {
		t.Errorf("gateway node %q, executor node %q: they share /dev/shm, so they must name one node", g, e)
	}
	ex := p.Services["executor"]
	repo, ok := argValue(ex.Command, "model-repository")
	if !ok {
		t.Fatal("executor: no --model-repository")
	}
	wantSrc, _ := filepath.Abs(filepath.Join(repoRoot, "deploy/model_repository"))
	var found bool
	for _, v := range ex.Volumes {
		if v.Target == repo {
			found = true
			if v.Source != wantSrc || !v.ReadOnly {
				t.Errorf("executor: %s mounted from %q (read-only %v), want %q read-only", repo, v.Source, v.ReadOnly, wantSrc)
			}
		}
	}
	if !found {
		t.Errorf("executor: nothing mounted at --model-repository %s", repo)
	}
	if cfgs, _ := filepath.Glob(filepath.Join(wantSrc, "*", "config.pbtxt")); len(cfgs) == 0 {
		t.Errorf("%s holds no model", wantSrc)
	}
}

func TestComposeHealthchecks(t *testing.T) {
	p := loadCompose(t)
	for _, name := range []string{"nats", "redis", "gateway", "shm-registry", "sequence-router", "executor"} {
		hc := p.Services[name].HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) == 0 {
			t.Errorf("%s: no healthcheck", name)
		}
	}
	test := func(name string) string { return strings.Join(p.Services[name].HealthCheck.Test, " ") }
	if !strings.Contains(test("gateway"), "/dev/tcp/127.0.0.1/8000") || !strings.Contains(test("gateway"), "/v2/health/ready") {
		t.Errorf("gateway healthcheck does not ask /v2/health/ready on 8000: %s", test("gateway"))
	}
	// The probe a healthcheck asks must be the one --probe-addr opens.
	for _, name := range []string{"shm-registry", "sequence-router", "executor"} {
		addr, ok := argValue(p.Services[name].Command, "probe-addr")
		if !ok {
			t.Errorf("%s: no --probe-addr", name)
			continue
		}
		port := addr[strings.LastIndex(addr, ":")+1:]
		if !strings.Contains(test(name), "/dev/tcp/127.0.0.1/"+port) || !strings.Contains(test(name), "/readyz") {
			t.Errorf("%s: healthcheck %q does not ask /readyz on --probe-addr %s", name, test(name), addr)
		}
	}
}

func TestComposeInterpolation(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		user string
		tag  string
	}{
		{nil, "65532:65532", "dev"},
		{[]string{"NEREID_UID=1000", "NEREID_GID=1000", "NEREID_TAG=v1"}, "1000:1000", "v1"},
	} {
		p := loadCompose(t, tt.env...)
		for _, name := range []string{"gateway", "executor"} {
			if u := p.Services[name].User; u != tt.user {
				t.Errorf("env %v: %s user %q, want %q", tt.env, name, u, tt.user)
			}
		}
		if img := p.Services["gateway"].Image; !strings.HasSuffix(img, ":"+tt.tag) {
			t.Errorf("env %v: gateway image %q, want tag %q", tt.env, img, tt.tag)
		}
	}
}

// TestComposeSecured checks that the compose file runs with NATS users and
// Redis ACLs on: NATS gets the generated authorization and every role's
// password, each service presents its role's credentials, Redis loads the
// ACL file, and the router and registry present their ACL users.
func TestComposeSecured(t *testing.T) {
	p := loadCompose(t)
	nats := p.Services["nats"]
	mounted := false
	for _, v := range nats.Volumes {
		mounted = mounted || strings.HasSuffix(v.Source, "deploy/docker/nats-auth.conf")
	}
	if !mounted {
		t.Error("nats: deploy/docker/nats-auth.conf is not mounted next to nats.conf")
	}
	conf, err := os.ReadFile(filepath.Join(repoRoot, "deploy/docker/nats.conf"))
	if err != nil || !strings.Contains(string(conf), `include "nats-auth.conf"`) {
		t.Errorf("deploy/docker/nats.conf does not include the authorization (err %v)", err)
	}
	for _, role := range []string{"GATEWAY", "EXECUTOR", "SEQUENCE_ROUTER", "SHM_REGISTRY"} {
		if v := nats.Environment["NEREID_NATS_"+role+"_PASSWORD"]; v == nil || *v == "" {
			t.Errorf("nats: no password for %s", role)
		}
	}
	for name, svc := range nereidServices(t, p) {
		env := p.Services[name].Environment
		user := env["NEREID_NATS_USER"]
		if user == nil || *user != svc {
			t.Errorf("%s: NEREID_NATS_USER %v, want %s", name, user, svc)
		}
		role := strings.ToUpper(strings.ReplaceAll(svc, "-", "_"))
		if pw := env["NEREID_NATS_PASSWORD"]; pw == nil || nats.Environment["NEREID_NATS_"+role+"_PASSWORD"] == nil || *pw != *nats.Environment["NEREID_NATS_"+role+"_PASSWORD"] {
			t.Errorf("%s: its NATS password is not the one nats checks", name)
		}
	}
	redis := p.Services["redis"]
	if v, ok := argValue(redis.Command, "aclfile"); !ok || v == "" {
		t.Errorf("redis: no --aclfile: %v", redis.Command)
	}
	for _, name := range []string{"sequence-router", "shm-registry", "executor"} {
		env := p.Services[name].Environment
		if u := env["NEREID_REDIS_USER"]; u == nil || *u != name {
			t.Errorf("%s: NEREID_REDIS_USER %v, want %s", name, u, name)
		}
		key := "NEREID_REDIS_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_PASSWORD"
		if pw, want := env["NEREID_REDIS_PASSWORD"], redis.Environment[key]; pw == nil || want == nil || *pw != *want {
			t.Errorf("%s: its Redis password is not the one redis is given (%s)", name, key)
		}
	}
}
