package containers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestSecondNode runs a second node: the compose file's executors as a
// project of their own with --node node2 and their own /dev/shm, on the first
// project's network. Requests whose shared-memory regions are on this node
// run on this node's executor; a large tensor crosses to node2 over NATS when
// only node2 serves; and a region of this node used when no executor of this
// node serves the model is refused with UNAVAILABLE naming the model and the
// node, never run by node2's executor, which cannot see the region.
func TestSecondNode(t *testing.T) {
	e := watchExecutors(t)
	scale(t, e, 1)
	local := e.live()[0]

	node2 := proj.Sibling("node2", []string{"e2e/containers/testdata/node2.yml"},
		"NEREID_NODE=node2", "NEREID_E2E_NETWORK="+proj.Network())
	t.Cleanup(func() {
		if err := node2.Down(); err != nil {
			t.Error(err)
		}
	})
	if err := node2.Up(ctxFor(t, 5*time.Minute), "--no-deps", "executor"); err != nil {
		t.Fatal(err)
	}
	ids := e.waitLive(t, 2, time.Minute)
	var far string
	for _, id := range ids {
		if id != local {
			far = id
		}
	}
	e.mu.Lock()
	nodes := map[string]string{local: e.node[local], far: e.node[far]}
	e.mu.Unlock()
	if nodes[local] != "local" || nodes[far] != "node2" {
		t.Fatalf("executor nodes %v, want %s on local and %s on node2", nodes, local, far)
	}

	// Regions on this node: every request runs on this node's executor.
	_, in := region(t, "node_in", 128)
	_, out := region(t, "node_out", 128)
	before := e.counts(t, ids, "simple")
	for k := range 20 {
		inferSimpleShm(t, "node_in", "node_out", in, out, int32(k))
	}
	after := e.counts(t, ids, "simple")
	t.Logf("shared-memory requests: %d on %s (local), %d on %s (node2)",
		after[local]-before[local], local, after[far]-before[far], far)
	if after[local]-before[local] != 20 || after[far] != before[far] {
		t.Errorf("shm requests ran %d times on the local executor and %d on node2's, want 20 and 0",
			after[local]-before[local], after[far]-before[far])
	}

	// Only node2 serves: a 16 MiB tensor goes there over NATS, in chunks.
	if err := proj.Up(ctxFor(t, 5*time.Minute), "--scale", "executor=0"); err != nil {
		t.Fatal(err)
	}
	e.waitLive(t, 1, time.Minute)
	n := 4 << 20
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i%1000)))
	}
	was := e.counts(t, []string{far}, "identity_fp32")[far]
	start := time.Now()
	got := inferIdentityBinary(t, data)
	t.Logf("16 MiB tensor through node2's executor (over NATS): %v", time.Since(start).Round(time.Millisecond))
	if !bytes.Equal(got, data) {
		t.Fatalf("identity_fp32 on node2 answered %d bytes, not the %d sent", len(got), len(data))
	}
	if now := e.counts(t, []string{far}, "identity_fp32")[far]; now != was+1 {
		t.Errorf("node2's executor counted %d identity_fp32 inferences, want %d", now, was+1)
	}

	// A region of this node with no executor of this node: refused.
	body := map[string]any{
		"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "parameters": shmParams("node_in", 0, 64)},
			map[string]any{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "parameters": shmParams("node_in", 64, 64)},
		},
	}
	code, msg, err := postJSON(httpBase+"/v2/models/simple/infer", body, nil)
	t.Logf("a region of node local, only node2 serving: %d %q", code, msg)
	want := "no executor is serving model 'simple' version 1 on node 'local'"
	if err != nil || code != http.StatusServiceUnavailable || msg != want {
		t.Errorf("a request with a region of a node no executor serves: %d %q %v, want 503 %q", code, msg, err, want)
	}
	// The server keeps serving plain requests through node2.
	if err := inferSimple(); err != nil {
		t.Fatalf("plain request through node2: %v", err)
	}
}

// inferIdentityBinary sends data as identity_fp32's INPUT0 ([1, len/4]) in the
// binary extension and returns OUTPUT0's bytes.
func inferIdentityBinary(t *testing.T, data []byte) []byte {
	t.Helper()
	hdr, _ := json.Marshal(map[string]any{
		"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{1, len(data) / 4},
			"parameters": map[string]any{"binary_data_size": len(data)}}},
		"outputs": []any{map[string]any{"name": "OUTPUT0", "parameters": map[string]any{"binary_data": true}}},
	})
	req, _ := http.NewRequest(http.MethodPost, httpBase+"/v2/models/identity_fp32/infer", io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(data)))
	req.ContentLength = int64(len(hdr) + len(data))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(hdr)))
	resp, err := (&http.Client{Timeout: 2 * requestTimeout}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("identity_fp32: %d %s", resp.StatusCode, raw)
	}
	n, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	if err != nil || n > len(raw) {
		t.Fatalf("Inference-Header-Content-Length %q for %d bytes", resp.Header.Get("Inference-Header-Content-Length"), len(raw))
	}
	return raw[n:]
}
