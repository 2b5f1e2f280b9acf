package containers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/compose"
)

// The commands of deploy/README.md that TestDocumentedCommands runs, as
// written there: each must be a line of one of its code blocks, so the guide
// cannot change a command without this test.
const (
	docImages         = "make images"
	docComposeEnv     = "make compose-env"
	docUpBuild        = "docker compose up --build -d --wait"
	docReady          = "curl localhost:8000/v2/health/ready"
	docModelConfig    = "curl localhost:8000/v2/models/simple/config"
	docScaleEnv       = "make compose-env NEREID_EXECUTORS=3"
	docUp             = "docker compose up -d --wait"
	docMonitoring     = "docker compose --profile monitoring up -d"
	docMonitoringDown = "docker compose --profile monitoring down -v"
	docDown           = "docker compose down -v"
	docBuildImages    = "docker compose --profile standalone build"
	docRunStandalone  = "docker run --rm -p 8000-8002:8000-8002 nereid:dev --model-repository /models"
	documentedReadme  = "deploy/README.md"
)

// readmeCommands are the lines of deploy/README.md's indented code blocks,
// without their comments.
func readmeCommands(t *testing.T, root string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, documentedReadme))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		cmd, ok := strings.CutPrefix(line, "    ")
		if !ok || strings.HasPrefix(cmd, " ") || strings.HasPrefix(cmd, "-") {
			continue
		}
		if i := strings.Index(cmd, "  #"); i >= 0 {
			cmd = cmd[:i]
		}
		out = append(out, strings.TrimSpace(cmd))
	}
	return out
}

// docShell runs the documented commands in a copy of the repository, as a
// user would in its root.
type docShell struct {
	t   *testing.T
	dir string
	env []string
}

// run runs one documented command with bash and returns its output; it
// fails the test when the command fails.
func (d *docShell) run(cmd string, timeout time.Duration) string {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Dir, c.Env = d.dir, d.env
	out, err := c.CombinedOutput()
	d.t.Logf("$ %s  (%v)", cmd, time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		d.t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// containers lists the running containers of a service of the documented
// project, sorted.
func (d *docShell) containers(service string) []string {
	d.t.Helper()
	ids := strings.Fields(d.run("docker compose ps -q "+service, time.Minute))
	slices.Sort(ids)
	return ids
}

// copyRepo copies the files git knows of (tracked, and untracked ones it
// does not ignore) under root to dir: a checkout with no .env and no build
// outputs.
func copyRepo(t *testing.T, root, dir string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, raw, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// takenPort says which of the host ports the documented commands publish is
// taken.
func takenPort() (int, bool) {
	for _, p := range []int{8000, 8001, 8002, 8003, 8004, 8222, 9090} {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return p, true
		}
		l.Close()
	}
	return 0, false
}

// httpOK waits until url answers 200.
func httpOK(url string, timeout time.Duration) error {
	var last string
	if waitFor(timeout, func() bool {
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		last = resp.Status
		return resp.StatusCode == http.StatusOK
	}) {
		return nil
	}
	return fmt.Errorf("GET %s: %s after %v", url, last, timeout)
}

// TestDocumentedCommands runs deploy/README.md's commands as written, in
// order, in a fresh copy of the repository (no .env) on this engine, which
// cannot pull: `make images` (which writes .env), `make compose-env`,
// `docker compose up --build -d --wait` with the services healthy and
// Triton's shared-memory example passing (regions this process creates, mode
// 0600, registered and used through localhost:8000), NEREID_EXECUTORS=3 kept
// by a later plain `up` with the gateway and executors not recreated, the
// monitoring profile, `down -v`, then the image build and the standalone
// image's `docker run`. It publishes the documented host ports (8000-8004,
// 8222, 9090), so it needs them free; its project is named for this process
// (COMPOSE_PROJECT_NAME) and removed when it ends.
func TestDocumentedCommands(t *testing.T) {
	start := time.Now()
	root := proj.Root
	documented := []string{docImages, docComposeEnv, docUpBuild, docReady, docModelConfig, docScaleEnv, docUp,
		docDown, docMonitoring, docMonitoringDown, docBuildImages, docRunStandalone}
	lines := readmeCommands(t, root)
	for _, c := range documented {
		if !slices.Contains(lines, c) {
			t.Errorf("%s has no code line %q", documentedReadme, c)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if p, taken := takenPort(); taken {
		if compose.Required() {
			t.Fatalf("port %d is taken: the documented commands publish it", p)
		}
		t.Skipf("port %d is taken: the documented commands publish it", p)
	}

	dir := t.TempDir()
	copyRepo(t, root, dir)
	name := proj.Name + "-docs"
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEREID_") && !strings.HasPrefix(kv, "COMPOSE_") {
			env = append(env, kv)
		}
	}
	// The images this test builds are tagged for it (NEREID_TAG, which the
	// compose file reads): rebuilding nereid-*:dev would make the suite's
	// project recreate its containers at its next up, on other ports.
	tag := "e2e-" + strconv.Itoa(os.Getpid())
	env = append(env, "COMPOSE_PROJECT_NAME="+name, "NEREID_TAG="+tag)
	d := &docShell{t: t, dir: dir, env: env}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, "docker", "compose", "--profile", "monitoring", "down", "-v", "--remove-orphans", "--timeout", "5")
		c.Dir, c.Env = dir, env
		_ = c.Run()
		for _, img := range []string{"nereid-gateway", "nereid-executor", "nereid-shm-registry", "nereid-sequence-router", "nereid"} {
			_, _ = compose.Docker(ctx, "rmi", img+":"+tag)
		}
	})

	// make images: warm, it rebuilds nothing; it writes .env.
	d.run(docImages, 10*time.Minute)
	dotenv, err := os.ReadFile(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatalf("make images wrote no .env: %v", err)
	}
	for _, want := range []string{
		"COMPOSE_FILE=docker-compose.yml:deploy/docker/compose.offline.yml",
		"NEREID_UID=" + strconv.Itoa(os.Getuid()),
		"NEREID_GID=" + strconv.Itoa(os.Getgid()),
	} {
		if !slices.Contains(strings.Split(string(dotenv), "\n"), want) {
			t.Errorf(".env after make images: no line %q:\n%s", want, dotenv)
		}
	}
	d.run(docComposeEnv, time.Minute)
	if again, _ := os.ReadFile(filepath.Join(dir, ".env")); !bytes.Equal(again, dotenv) {
		t.Errorf("make compose-env changed the .env make images wrote:\n%s\nnow\n%s", dotenv, again)
	}

	// One box: up, healthy, ready, and Triton's system shared-memory example
	// with this process's regions.
	d.run(docUpBuild, 10*time.Minute)
	for svc, n := range map[string]int{"nats": 1, "redis": 1, "shm-registry": 1, "sequence-router": 2, "gateway": 1, "executor": 1} {
		if got := len(d.containers(svc)); got != n {
			t.Errorf("after %s: %d %s containers, want %d", docUpBuild, got, svc, n)
		}
	}
	d.run(docReady, time.Minute)
	base := "http://localhost:8000"
	if code, err := getJSON(base+"/v2/health/ready", nil); err != nil || code != http.StatusOK {
		t.Errorf("after %s: ready %d %v", docUpBuild, code, err)
	}
	if out := d.run(docModelConfig, time.Minute); !strings.Contains(out, `"simple"`) {
		t.Errorf("%s: %s", docModelConfig, out)
	}
	_, in := regionAt(t, base, "doc_in", 128)
	_, out := regionAt(t, base, "doc_out", 128)
	inferSimpleShmAt(t, base, "doc_in", "doc_out", in, out, 3)
	gateway := d.containers("gateway")

	// Scale, kept by a later plain up; gateway and executors are not recreated.
	d.run(docScaleEnv, time.Minute)
	d.run(docUp, 5*time.Minute)
	executors := d.containers("executor")
	if len(executors) != 3 {
		t.Errorf("after %s and %s: %d executors, want 3", docScaleEnv, docUp, len(executors))
	}
	d.run(docUp, 5*time.Minute)
	if again := d.containers("executor"); !slices.Equal(again, executors) {
		t.Errorf("a second %s changed the executors: %v, then %v", docUp, executors, again)
	}
	if again := d.containers("gateway"); !slices.Equal(again, gateway) {
		t.Errorf("the later ups recreated the gateway: %v, then %v", gateway, again)
	}
	inferSimpleShmAt(t, base, "doc_in", "doc_out", in, out, -4)
	for _, name := range []string{"doc_in", "doc_out"} {
		_, _, _ = postJSON(base+"/v2/systemsharedmemory/region/"+name+"/unregister", map[string]any{}, nil)
	}
	d.run(docDown, 5*time.Minute)
	if left := d.run("docker compose ps -aq", time.Minute); strings.TrimSpace(left) != "" {
		t.Errorf("after %s: containers %s", docDown, left)
	}

	// Monitoring: everything again, with Prometheus, at the scale in .env.
	d.run(docMonitoring, 5*time.Minute)
	if n := len(d.containers("executor")); n != 3 {
		t.Errorf("after %s: %d executors, want 3 (.env)", docMonitoring, n)
	}
	if err := httpOK("http://127.0.0.1:9090/-/ready", 2*time.Minute); err != nil {
		t.Errorf("%s: Prometheus: %v", docMonitoring, err)
	}
	if err := httpOK(base+"/v2/health/ready", 2*time.Minute); err != nil {
		t.Errorf("%s: %v", docMonitoring, err)
	}
	d.run(docMonitoringDown, 5*time.Minute)
	if left := d.run("docker compose --profile monitoring ps -aq", time.Minute); strings.TrimSpace(left) != "" {
		t.Errorf("after %s: containers %s", docMonitoringDown, left)
	}

	// Images: the build, then the standalone image as documented.
	d.run(docBuildImages, 10*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "bash", "-c", "exec "+docRunStandalone)
	run.Dir, run.Env = dir, env
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- run.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = run.Process.Signal(syscall.SIGTERM)
			<-ended
		}
	}()
	if err := httpOK(base+"/v2/health/ready", 2*time.Minute); err != nil {
		t.Fatalf("%s: %v\n%s", docRunStandalone, err, runOut.String())
	}
	var a inferAnswer
	if code, msg, err := postJSON(base+"/v2/models/simple/infer", simpleBody(), &a); err != nil || code != http.StatusOK || len(a.output("OUTPUT0")) != 16 {
		t.Errorf("%s: simple: %d %s %v", docRunStandalone, code, msg, err)
	}
	// docker run passes the signal on; --rm removes the container.
	_ = run.Process.Signal(syscall.SIGTERM)
	stopped = true
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Errorf("%s did not end a minute after SIGTERM", docRunStandalone)
	}
	t.Logf("the documented commands: %v", time.Since(start).Round(time.Second))
}
