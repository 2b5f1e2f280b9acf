package constellation

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// WriteRepo writes a model repository of the given configurations (model
// name to config.pbtxt text, each with an empty version 1) in a temporary
// directory and returns it.
func WriteRepo(t testing.TB, configs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, cfg := range configs {
		if err := os.MkdirAll(filepath.Join(dir, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Call makes one HTTP request and returns its status and body.
func Call(t testing.TB, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Scrape reads a Prometheus /metrics page into its samples, keyed by the
// series as the page prints it (name{label="value",...}), and returns the
// page too.
func Scrape(url string) (map[string]float64, string, error) {
	r, err := http.Get(url)
	if err != nil {
		return nil, "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s: %d %v", url, r.StatusCode, err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, "", fmt.Errorf("%s: bad sample %q", url, line)
		}
		out[line[:i]] = v
	}
	return out, string(b), nil
}
