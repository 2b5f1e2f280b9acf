package validate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// TestComposeExecutorsScale: the executors' scale comes from NEREID_EXECUTORS
// (which .env keeps, scripts/compose-env.sh), so that a plain `docker compose
// up -d` keeps a scale; one executor by default.
func TestComposeExecutorsScale(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want int
	}{{nil, 1}, {[]string{"NEREID_EXECUTORS=3"}, 3}} {
		d := loadCompose(t, tt.env...).Services["executor"].Deploy
		if d == nil || d.Replicas == nil || *d.Replicas != tt.want {
			t.Errorf("env %v: executor deploy %+v, want replicas %d", tt.env, d, tt.want)
		}
	}
}

// loadStandalone loads the compose files with the standalone profile on.
func loadStandalone(t *testing.T, files ...string) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.Join(root, f))
	}
	opts, err := cli.NewProjectOptions(paths, cli.WithWorkingDirectory(root), cli.WithEnv(nil),
		cli.WithInterpolation(true), cli.WithResolvedPaths(true), cli.WithProfiles([]string{"standalone"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("%v with the standalone profile does not load: %v", files, err)
	}
	return p
}

// TestComposeStandalone: `docker compose --profile standalone build` builds
// the standalone image the documented `docker run` uses (nereid:dev),
// offline too, and the service exists only under its profile.
func TestComposeStandalone(t *testing.T) {
	if _, ok := loadCompose(t).Services["standalone"]; ok {
		t.Error("standalone is a service without its profile")
	}
	p := loadStandalone(t, "docker-compose.yml")
	s, ok := p.Services["standalone"]
	if !ok {
		t.Fatal("no standalone service under the standalone profile")
	}
	if s.Build == nil || s.Build.Args["SERVICE"] == nil || *s.Build.Args["SERVICE"] != "standalone" {
		t.Fatalf("standalone: build %+v, want SERVICE=standalone", s.Build)
	}
	if s.Image != "nereid:dev" {
		t.Errorf("standalone: image %q, want nereid:dev (deploy/README.md's docker run)", s.Image)
	}
	if len(s.Ports) > 0 {
		t.Errorf("standalone: ports %v would collide with the gateway's", s.Ports)
	}
	checkArgs(t, "docker-compose.yml standalone", "standalone", s.Command)
	off := loadStandalone(t, "docker-compose.yml", "deploy/docker/compose.offline.yml").Services["standalone"]
	for arg := range offlineArgs {
		if v := off.Build.Args[arg]; v == nil || *v == "" {
			t.Errorf("standalone: the offline override passes no %s", arg)
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "deploy/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	run := regexp.MustCompile(`(?m)^ {4}docker run .* (\S+) --model-repository`).FindSubmatch(readme)
	if run == nil || string(run[1]) != s.Image {
		t.Errorf("deploy/README.md's docker run of the standalone image: %q, want image %s", run, s.Image)
	}
	if !strings.Contains(string(readme), "docker compose --profile standalone build") {
		t.Error("deploy/README.md does not say how to build the standalone image")
	}
}
