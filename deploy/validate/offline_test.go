package validate

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
)

// offlineArgs are the Dockerfile's base-image arguments, with the public
// images users pull by default.
var offlineArgs = map[string]string{
	"GOLANG_IMAGE": "golang:1.26-trixie",
	"DEBIAN_IMAGE": "debian:trixie-slim",
}

// TestComposeOffline checks that deploy/docker/compose.offline.yml, which
// `make images` and the container e2e suite add to docker-compose.yml, changes
// nothing but where the third-party images come from: the nats and redis image
// names and the Dockerfile's base-image arguments. The constellation under
// test is then the one users run.
func TestComposeOffline(t *testing.T) {
	base := loadCompose(t)
	off := loadComposeFiles(t, []string{"docker-compose.yml", "deploy/docker/compose.offline.yml"})
	if !reflect.DeepEqual(base.ServiceNames(), off.ServiceNames()) {
		t.Fatalf("services %v with the override, %v without", off.ServiceNames(), base.ServiceNames())
	}
	for name, s := range off.Services {
		b := base.Services[name]
		switch name {
		case "nats", "redis":
			if s.Image == b.Image {
				t.Errorf("%s: the override keeps the public image %s", name, s.Image)
			}
			s.Image = b.Image
		}
		if s.Build != nil {
			args := map[string]*string{}
			for k, v := range s.Build.Args {
				args[k] = v
			}
			for arg := range offlineArgs {
				if v := args[arg]; v == nil || *v == "" {
					t.Errorf("%s: the override passes no %s", name, arg)
				}
				delete(args, arg)
			}
			build := *s.Build
			build.Args = args
			if len(args) == 0 {
				build.Args = nil
			}
			s.Build = &build
		}
		if !reflect.DeepEqual(s, b) {
			t.Errorf("%s: the offline override changes more than image names and base-image arguments:\n%+v\nwant\n%+v", name, s, b)
		}
	}
}

// TestDockerfileBaseImages checks that the Dockerfile's stages start from the
// base-image arguments, whose defaults are the public images.
func TestDockerfileBaseImages(t *testing.T) {
	df, err := os.ReadFile(filepath.Join(repoRoot, "deploy/docker/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for arg, def := range offlineArgs {
		if !regexp.MustCompile(`(?m)^ARG ` + arg + `=` + regexp.QuoteMeta(def) + `$`).Match(df) {
			t.Errorf("Dockerfile: no ARG %s=%s before the first FROM", arg, def)
		}
		if !regexp.MustCompile(`(?m)^FROM \$\{` + arg + `\}`).Match(df) {
			t.Errorf("Dockerfile: no stage FROM ${%s}", arg)
		}
	}
	if regexp.MustCompile(`(?m)^# *syntax=`).Match(df) {
		t.Error("Dockerfile: a # syntax= line makes BuildKit pull a frontend image, which an offline engine cannot")
	}
	if regexp.MustCompile(`(?m)^FROM (golang|debian):`).Match(df) {
		t.Error("Dockerfile: a FROM names a public image directly; offline builds cannot replace it")
	}
}

// TestNATSStaleClients checks that the compose file's NATS and the chart's
// drop an unresponsive client within seconds, with the same settings: the
// container e2e suite's partition test relies on it (a partitioned executor
// keeps receiving queue-group requests until its server drops it).
func TestNATSStaleClients(t *testing.T) {
	for _, f := range []string{"deploy/docker/nats.conf", "charts/nereid/templates/nats.yaml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`ping_interval: "2s"`, `ping_max: 2`} {
			if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(want) + `\s*$`).Match(b) {
				t.Errorf("%s: no %s", f, want)
			}
		}
	}
}
