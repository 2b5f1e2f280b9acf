package validate

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// TestDockerfileContext checks that every path the Dockerfile copies from the
// build context survives .dockerignore (matched with the same pattern
// matcher docker build uses), and that the Dockerfile knows every SERVICE.
func TestDockerfileContext(t *testing.T) {
	df, err := os.ReadFile(filepath.Join(repoRoot, "deploy/docker/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}

	var copied []string
	sc := bufio.NewScanner(strings.NewReader(string(df)))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || !strings.EqualFold(fields[0], "COPY") || strings.HasPrefix(fields[1], "--from") {
			continue
		}
		copied = append(copied, fields[1:len(fields)-1]...)
	}
	if len(copied) == 0 {
		t.Fatal("no COPY from the build context found")
	}
	for _, src := range copied {
		if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
			t.Errorf("COPY %s: %v", src, err)
			continue
		}
		// A file deep inside the copied tree must survive too (a parent
		// exclusion with a later ! exception is the usual trap).
		var probe string
		_ = filepath.WalkDir(filepath.Join(repoRoot, src), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasSuffix(path, "_test.go") && (strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".pbtxt") || strings.HasSuffix(path, "go.mod")) {
				probe, _ = filepath.Rel(repoRoot, path)
				return filepath.SkipAll
			}
			return nil
		})
		for _, p := range []string{src, probe} {
			if p == "" {
				continue
			}
			if excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(p)); err != nil || excluded {
				t.Errorf(".dockerignore excludes %s, which the Dockerfile copies (err %v)", p, err)
			}
		}
	}
	// A service builds with GOWORK=off, so every sibling module its go.mod
	// replaces with a directory (pkg, api, internal, ...) must be copied too.
	for _, svc := range []string{"gateway", "executor", "shm-registry", "sequence-router", "standalone"} {
		dir := filepath.Join("services", svc)
		gomod, err := os.ReadFile(filepath.Join(repoRoot, dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(gomod), "\n") {
			_, target, ok := strings.Cut(line, "=>")
			if !ok || !strings.HasPrefix(strings.TrimSpace(target), ".") {
				continue
			}
			rel := filepath.ToSlash(filepath.Join(dir, strings.TrimSpace(target)))
			if !slices.ContainsFunc(copied, func(src string) bool {
				src = strings.TrimSuffix(filepath.ToSlash(filepath.Clean(src)), "/")
				return rel == src || strings.HasPrefix(rel, src+"/")
			}) {
				t.Errorf("%s/go.mod replaces a module with %s, which the Dockerfile does not copy", dir, rel)
			}
		}
	}
	for _, p := range []string{".git/HEAD", "bin/nats-server", "e2e/go.mod", "charts/nereid/Chart.yaml", "pkg/bus/bus_test.go"} {
		if excluded, _ := pm.MatchesOrParentMatches(p); !excluded {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}
	for _, svc := range []string{"gateway", "executor", "shm-registry", "sequence-router", "standalone"} {
		if _, err := os.Stat(cmdDir(svc)); err != nil {
			t.Errorf("SERVICE=%s: %v", svc, err)
		}
		if !strings.Contains(string(df), svc) {
			t.Errorf("Dockerfile does not handle SERVICE=%s", svc)
		}
	}
}
