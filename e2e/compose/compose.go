// Package compose runs the shipped docker-compose.yml with Docker Compose v2
// (`docker compose`) for the container end-to-end suites: one project per test
// binary, named for its process so that parallel runs never meet, with the
// images `make images` built (deploy/docker/compose.offline.yml names their
// offline bases), removed with its containers, networks and volumes when the
// tests end.
package compose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProjectPrefix starts the name of every project the suites create; a
// project's name ends with the id of the test process that owns it.
const ProjectPrefix = "nereid-e2e-"

// OfflineOverride is the compose file `make images` adds to docker-compose.yml.
const OfflineOverride = "deploy/docker/compose.offline.yml"

// Required says whether this machine is meant to have a Docker engine:
// NEREID_DOCKER=required, or CI=true unless NEREID_DOCKER is set otherwise
// (the rule scripts/images.sh applies too).
func Required() bool {
	switch os.Getenv("NEREID_DOCKER") {
	case "required":
		return true
	case "off":
		return false
	}
	return os.Getenv("CI") == "true"
}

// Check says why the suites cannot run here: the engine does not answer,
// Compose v2 is missing, or an image is not built.
func Check(root string) error {
	if os.Getenv("NEREID_DOCKER") == "off" {
		return errors.New("NEREID_DOCKER=off")
	}
	if out, err := run(context.Background(), "", nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		return fmt.Errorf("no Docker engine answers (docker info: %v: %s)", err, strings.TrimSpace(out))
	}
	if out, err := run(context.Background(), "", nil, "docker", "compose", "version", "--short"); err != nil {
		return fmt.Errorf("docker compose (v2) does not run (%v: %s); make images installs it", err, strings.TrimSpace(out))
	}
	p := &Project{Root: root, Files: []string{"docker-compose.yml", OfflineOverride}, Env: defaultEnv()}
	out, err := p.Compose(context.Background(), "config", "--images")
	if err != nil {
		return fmt.Errorf("docker compose config: %v: %s", err, out)
	}
	var missing []string
	for _, img := range strings.Fields(out) {
		if _, err := run(context.Background(), "", nil, "docker", "image", "inspect", "--format", "{{.Id}}", img); err != nil {
			missing = append(missing, img)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("images not built: %s; run make images", strings.Join(missing, " "))
	}
	return nil
}

// Root is the repository root (where docker-compose.yml is).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "docker-compose.yml")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no docker-compose.yml above %s", dir)
		}
	}
}

// Project is one compose project: the shipped file, the offline override and
// any test files, under a name of its own.
type Project struct {
	Name  string
	Root  string
	Files []string // relative to Root, merged in order
	Env   []string // added to the environment of every docker compose call
}

// defaultEnv runs gateway and executors as this process's uid, so they can
// open the shared-memory regions the tests create (mode 0600), as the compose
// file tells clients to do.
func defaultEnv() []string {
	return []string{
		"NEREID_UID=" + strconv.Itoa(os.Getuid()),
		"NEREID_GID=" + strconv.Itoa(os.Getgid()),
	}
}

// New returns a project named for this process, using docker-compose.yml, the
// offline override and the extra files (relative to root).
func New(root string, extra ...string) *Project {
	return &Project{
		Name:  ProjectPrefix + strconv.Itoa(os.Getpid()),
		Root:  root,
		Files: append([]string{"docker-compose.yml", OfflineOverride}, extra...),
		Env:   defaultEnv(),
	}
}

// Sibling is another project beside p (named p.Name-suffix) with the same
// files plus extra, and env added to p's environment.
func (p *Project) Sibling(suffix string, extra []string, env ...string) *Project {
	return &Project{
		Name:  p.Name + "-" + suffix,
		Root:  p.Root,
		Files: append(slices.Clone(p.Files), extra...),
		Env:   append(slices.Clone(p.Env), env...),
	}
}

// Compose runs docker compose on the project and returns its combined output.
// The .env beside docker-compose.yml (make images, make compose-env) is not
// read: the project's files and Env are all there is, so a developer's .env
// (a scale, passwords) never changes what the suites run.
func (p *Project) Compose(ctx context.Context, args ...string) (string, error) {
	full := []string{"compose", "--project-directory", p.Root, "--env-file", os.DevNull}
	if p.Name != "" {
		full = append(full, "-p", p.Name)
	}
	for _, f := range p.Files {
		full = append(full, "-f", filepath.Join(p.Root, f))
	}
	full = append(full, args...)
	return run(ctx, p.Root, p.Env, "docker", full...)
}

// Up brings the project up and waits until every service with a healthcheck
// is healthy (docker compose up -d --wait); the images must exist.
func (p *Project) Up(ctx context.Context, args ...string) error {
	a := append([]string{"up", "-d", "--wait", "--no-build", "--pull", "never"}, args...)
	if out, err := p.Compose(ctx, a...); err != nil {
		return fmt.Errorf("docker compose up: %v\n%s", err, out)
	}
	return nil
}

// Down removes the project's containers, networks and volumes.
func (p *Project) Down() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := p.Compose(ctx, "down", "--volumes", "--remove-orphans", "--timeout", "5"); err != nil {
		return fmt.Errorf("docker compose down: %v\n%s", err, out)
	}
	return nil
}

// Port is the host address a service's container port is published on.
func (p *Project) Port(ctx context.Context, service string, port int) (string, error) {
	out, err := p.Compose(ctx, "port", service, strconv.Itoa(port))
	if err != nil {
		return "", fmt.Errorf("docker compose port %s %d: %v: %s", service, port, err, out)
	}
	return strings.TrimSpace(out), nil
}

// Containers lists the ids of a service's running containers.
func (p *Project) Containers(ctx context.Context, service string) ([]string, error) {
	out, err := p.Compose(ctx, "ps", "-q", service)
	if err != nil {
		return nil, fmt.Errorf("docker compose ps %s: %v: %s", service, err, out)
	}
	return strings.Fields(out), nil
}

// Network is the name of the project's default network.
func (p *Project) Network() string { return p.Name + "_default" }

// Docker runs the docker CLI (not compose) and returns its combined output.
func Docker(ctx context.Context, args ...string) (string, error) {
	return run(ctx, "", nil, "docker", args...)
}

// IP is a container's address on the project's network (the host reaches it
// directly on Linux's bridge networks).
func (p *Project) IP(ctx context.Context, container string) (string, error) {
	out, err := Docker(ctx, "inspect", "--format", `{{ (index .NetworkSettings.Networks "`+p.Network()+`").IPAddress }}`, container)
	if err != nil {
		return "", fmt.Errorf("docker inspect %s: %v: %s", container, err, out)
	}
	ip := strings.TrimSpace(out)
	if ip == "" || ip == "<no value>" {
		return "", fmt.Errorf("container %s has no address on %s", container, p.Network())
	}
	return ip, nil
}

// Logs is the output of one container.
func Logs(ctx context.Context, container string) string {
	out, _ := Docker(ctx, "logs", container)
	return out
}

// RemoveStale removes the projects of test processes that no longer run
// (a run killed before its cleanup), so their containers do not pile up.
func RemoveStale(root string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := Docker(ctx, "compose", "ls", "--all", "--quiet", "--filter", "name="+ProjectPrefix)
	if err != nil {
		return
	}
	// Siblings (name-suffix) first: they hold on to their first project's network.
	names := strings.Fields(out)
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, name := range names {
		owner, _, _ := strings.Cut(strings.TrimPrefix(name, ProjectPrefix), "-")
		pid, err := strconv.Atoi(owner)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		p := &Project{Name: name, Root: root, Files: []string{"docker-compose.yml", OfflineOverride}, Env: defaultEnv()}
		if err := p.Down(); err == nil {
			fmt.Fprintf(os.Stderr, "compose: removed the project %s of a test process that is gone\n", name)
		}
	}
}

func run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}
