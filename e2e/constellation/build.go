package constellation

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Binaries are the built programs, by name.
type Binaries struct {
	Dir string
}

// Path returns the path of the named binary ("nereid-gateway", "nats-server").
func (b *Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

var (
	buildOnce sync.Once
	built     *Binaries
	buildErr  error
)

// Root is the repository root (the directory holding go.work).
func Root() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	w := strings.TrimSpace(string(out))
	if w == "" || w == "off" {
		return "", fmt.Errorf("e2e tests need the workspace (go.work); GOWORK=%q", w)
	}
	return filepath.Dir(w), nil
}

// Build compiles every service binary and nats-server into a temporary
// directory, once per test process; Main removes it when the tests end.
func Build() (*Binaries, error) {
	buildOnce.Do(func() { built, buildErr = build() })
	return built, buildErr
}

// Main runs a package's tests, then removes what Build made (some 190 MB
// per test process, which would otherwise fill the disk run after run).
// Every package that builds the binaries has
//
//	func TestMain(m *testing.M) { os.Exit(constellation.Main(m)) }
func Main(m interface{ Run() int }) int {
	code := m.Run()
	RemoveBinaries()
	return code
}

// RemoveBinaries deletes the directory Build made, if it made one; for a
// TestMain that does more than Main.
func RemoveBinaries() {
	if built != nil {
		_ = os.RemoveAll(built.Dir)
	}
}

func build() (*Binaries, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nereid-e2e-bin-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	targets := map[string]string{
		"nereid":                 "./services/standalone/cmd/nereid",
		"nereid-gateway":         "./services/gateway/cmd/gateway",
		"nereid-executor":        "./services/executor/cmd/executor",
		"nereid-shm-registry":    "./services/shm-registry/cmd/shm-registry",
		"nereid-sequence-router": "./services/sequence-router/cmd/sequence-router",
		"nereidctl":              "./services/gateway/cmd/nereidctl",
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, pkg := range targets {
		args = append(args, pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	// go build names binaries after the last path element; give them their names.
	for name, pkg := range targets {
		from := filepath.Join(dir, filepath.Base(pkg))
		if from != filepath.Join(dir, name) {
			if err := os.Rename(from, filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	// libtritonserver.so beside the executor, where it looks for it before
	// loading a Triton backend.
	cmd = exec.Command("cc", "-shared", "-fPIC", "-Wl,-soname,libtritonserver.so", "-o", filepath.Join(dir, "libtritonserver.so"),
		filepath.Join(root, "services", "executor", "internal", "cbackend", "stub", "tritonserver_stub.c"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build libtritonserver.so: %v\n%s", err, out)
	}
	// The real nats-server, at the version the module graph pins.
	cmd = exec.Command("go", "build", "-o", filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2")
	cmd.Dir = filepath.Join(root, "e2e")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build nats-server: %v\n%s", err, out)
	}
	ok = true
	return &Binaries{Dir: dir}, nil
}
