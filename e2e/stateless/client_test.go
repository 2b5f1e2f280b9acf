package stateless

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
)

// httpResult is one HTTP exchange: status, headers and the body parsed as JSON.
type httpResult struct {
	Status int
	Header http.Header
	Raw    []byte
	JSON   map[string]any
	Array  []any
}

func (r httpResult) errorMessage() string {
	if s, ok := r.JSON["error"].(string); ok {
		return s
	}
	return ""
}

func do(t *testing.T, method, url string, body []byte, hdr map[string]string) httpResult {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	// Disable Go's transparent gzip so tests see exactly what the server sent.
	tr := &http.Transport{DisableCompression: true}
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	res := httpResult{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	plain := raw
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("gzip response: %v", err)
		}
		if plain, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	if len(plain) > 0 && (plain[0] == '{' || plain[0] == '[') {
		if plain[0] == '{' {
			_ = json.Unmarshal(plain, &res.JSON)
		} else {
			_ = json.Unmarshal(plain, &res.Array)
		}
	}
	return res
}

func get(t *testing.T, url string) httpResult { return do(t, http.MethodGet, url, nil, nil) }

func post(t *testing.T, url, body string) httpResult {
	return do(t, http.MethodPost, url, []byte(body), map[string]string{"Content-Type": "application/json"})
}

func grpcClient(t *testing.T, target string) inference.GRPCInferenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return inference.NewGRPCInferenceServiceClient(conn)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func contains(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("%s: got %q, want it to contain %q", what, got, want)
	}
}

// numbers converts a JSON array of numbers to int64s.
func numbers(t *testing.T, v any) []int64 {
	t.Helper()
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("not an array: %#v", v)
	}
	out := make([]int64, len(arr))
	for i, x := range arr {
		f, ok := x.(float64)
		if !ok {
			t.Fatalf("element %d not a number: %#v", i, x)
		}
		out[i] = int64(f)
	}
	return out
}

// output finds the named output of an HTTP infer response.
func output(t *testing.T, resp map[string]any, name string) map[string]any {
	t.Helper()
	outs, _ := resp["outputs"].([]any)
	for _, o := range outs {
		m := o.(map[string]any)
		if m["name"] == name {
			return m
		}
	}
	t.Fatalf("output %s missing from %v", name, resp)
	return nil
}
