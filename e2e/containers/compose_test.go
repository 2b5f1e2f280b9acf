package containers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/shm"
)

// TestUp: `docker compose up --wait` returned with every service the compose
// file names running, the gateway ready and the example models served.
func TestUp(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	want := map[string]int{"nats": 1, "redis": 1, "shm-registry": 1, "sequence-router": 2, "gateway": 1, "executor": 1}
	for svc, n := range want {
		ids, err := proj.Containers(ctx, svc)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != n {
			t.Errorf("%s: %d containers running, want %d", svc, len(ids), n)
		}
	}
	if code, err := getJSON(httpBase+"/v2/health/ready", nil); err != nil || code != http.StatusOK {
		t.Fatalf("gateway ready: %d %v", code, err)
	}
	for _, m := range []string{"simple", "simple_string_dyna_sequence", "simple_sequence"} {
		if code, err := getJSON(httpBase+"/v2/models/"+m+"/ready", nil); err != nil || code != http.StatusOK {
			t.Errorf("model %s ready: %d %v", m, code, err)
		}
	}
	// NATS monitoring is published as the compose file says.
	if code, err := getJSON(natsMon+"/healthz", nil); err != nil || code != http.StatusOK {
		t.Errorf("NATS /healthz: %d %v", code, err)
	}
}

// TestStateless: Triton's simple example over HTTP/JSON and gRPC, and the
// gateway's /metrics/constellation counting them.
func TestStateless(t *testing.T) {
	for range 5 {
		if err := inferSimple(); err != nil {
			t.Fatalf("http: %v", err)
		}
	}
	c := grpcClient(t)
	ctx := ctxFor(t, time.Minute)
	in0, in1 := make([]int32, 16), make([]int32, 16)
	for i := range in0 {
		in0[i], in1[i] = int32(i), 1
	}
	resp, err := c.ModelInfer(ctx, &inference.ModelInferRequest{
		ModelName: "simple", Id: "grpc-1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: in0}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: in1}},
		},
	})
	if err != nil {
		t.Fatalf("grpc: %v", err)
	}
	if resp.GetId() != "grpc-1" || len(resp.GetRawOutputContents()) != 2 {
		t.Fatalf("grpc answer: %v", resp)
	}
	for i := range 16 {
		sum := int32(binary.LittleEndian.Uint32(resp.GetRawOutputContents()[0][4*i:]))
		if sum != int32(i)+1 {
			t.Fatalf("grpc OUTPUT0[%d] = %d", i, sum)
		}
	}
	live, err := c.ServerLive(ctx, &inference.ServerLiveRequest{})
	if err != nil || !live.GetLive() {
		t.Fatalf("grpc ServerLive: %v %v", live, err)
	}

	// The gateway's sums of the executors' counts (their /metrics ports
	// are not published).
	res, err := http.Get(metrics + "/constellation")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var n float64
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, `nv_inference_request_success{model="simple",version="1"}`) {
			n, _ = strconv.ParseFloat(strings.Fields(line)[1], 64)
		}
	}
	if n < 6 {
		t.Errorf("nv_inference_request_success of simple = %v after 6 requests", n)
	}
}

// TestBinary: the binary tensor data extension, both ways.
func TestBinary(t *testing.T) {
	var in bytes.Buffer
	for i := range 16 {
		_ = binary.Write(&in, binary.LittleEndian, int32(i))
	}
	for range 16 {
		_ = binary.Write(&in, binary.LittleEndian, int32(3))
	}
	hdr, _ := json.Marshal(map[string]any{
		"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "parameters": map[string]any{"binary_data_size": 64}},
			map[string]any{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "parameters": map[string]any{"binary_data_size": 64}},
		},
		"outputs": []any{
			map[string]any{"name": "OUTPUT0", "parameters": map[string]any{"binary_data": true}},
			map[string]any{"name": "OUTPUT1", "parameters": map[string]any{"binary_data": true}},
		},
	})
	body := append(hdr, in.Bytes()...)
	req, _ := http.NewRequest(http.MethodPost, httpBase+"/v2/models/simple/infer", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(hdr)))
	resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	n, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	if err != nil || n > len(raw) {
		t.Fatalf("Inference-Header-Content-Length %q for %d bytes", resp.Header.Get("Inference-Header-Content-Length"), len(raw))
	}
	var out struct {
		Outputs []struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(raw[:n], &out); err != nil {
		t.Fatalf("header %q: %v", raw[:n], err)
	}
	data := raw[n:]
	if len(out.Outputs) != 2 || len(data) != 128 {
		t.Fatalf("outputs %+v with %d bytes", out.Outputs, len(data))
	}
	for k, o := range out.Outputs {
		for i := range 16 {
			v := int32(binary.LittleEndian.Uint32(data[64*k+4*i:]))
			want := int32(i) + 3
			if o.Name == "OUTPUT1" {
				want = int32(i) - 3
			}
			if v != want {
				t.Fatalf("%s[%d] = %d, want %d", o.Name, i, v, want)
			}
		}
	}
}

// TestSequence: sequences through the two routers (state in Redis) and the
// executor, interleaved, as Triton's sequence client examples send them.
func TestSequence(t *testing.T) {
	ids := []string{"seq-a", "seq-b", "seq-c"}
	sums := map[string]int32{}
	for k, id := range ids {
		v := int32(10 * (k + 1))
		if got := accumulate(t, id, v, true, false); got != v {
			t.Fatalf("start %s: %d, want %d", id, got, v)
		}
		sums[id] = v
	}
	for step := range 4 {
		for _, id := range ids {
			v := int32(step + 1)
			sums[id] += v
			if got := accumulate(t, id, v, false, step == 3); got != sums[id] {
				t.Fatalf("sequence %s step %d: %d, want %d", id, step, got, sums[id])
			}
		}
	}
	// Ended: a request without START is refused, as Triton does.
	_, code, msg, err := seqInfer("simple_string_dyna_sequence", "seq-a", 1, false, false)
	if err != nil || code != http.StatusBadRequest || !strings.Contains(msg, "must specify the START flag") {
		t.Fatalf("after the end: %d %q %v", code, msg, err)
	}
}

// region is a system shared-memory region this test creates on the host,
// as a client does; the containers see it through ipc: host.
func region(t *testing.T, name string, size int) (string, *shm.Mapping) {
	t.Helper()
	return regionAt(t, httpBase, name, size)
}

// regionAt is region for the gateway at base.
func regionAt(t *testing.T, base, name string, size int) (string, *shm.Mapping) {
	t.Helper()
	key := fmt.Sprintf("/nereid-e2e-containers-%d-%s", os.Getpid(), name)
	m, err := shm.Create(key, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(); _ = shm.Unlink(key) })
	code, msg, err := postJSON(base+"/v2/systemsharedmemory/region/"+name+"/register",
		map[string]any{"key": key, "offset": 0, "byte_size": size}, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("register %s: %d %s %v", name, code, msg, err)
	}
	t.Cleanup(func() {
		_, _, _ = postJSON(base+"/v2/systemsharedmemory/region/"+name+"/unregister", map[string]any{}, nil)
	})
	return key, m
}

func shmParams(name string, offset, size int) map[string]any {
	return map[string]any{"shared_memory_region": name, "shared_memory_offset": offset, "shared_memory_byte_size": size}
}

// inferSimpleShm runs "simple" with inputs and outputs in the two regions and
// checks the outputs the executor wrote there.
func inferSimpleShm(t *testing.T, inName, outName string, in, out *shm.Mapping, add int32) {
	t.Helper()
	inferSimpleShmAt(t, httpBase, inName, outName, in, out, add)
}

// inferSimpleShmAt is inferSimpleShm through the gateway at base.
func inferSimpleShmAt(t *testing.T, base, inName, outName string, in, out *shm.Mapping, add int32) {
	t.Helper()
	var b bytes.Buffer
	for i := range 16 {
		_ = binary.Write(&b, binary.LittleEndian, int32(i))
	}
	for range 16 {
		_ = binary.Write(&b, binary.LittleEndian, add)
	}
	if err := in.Write(0, b.Bytes()); err != nil {
		t.Fatal(err)
	}
	body := map[string]any{
		"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "parameters": shmParams(inName, 0, 64)},
			map[string]any{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "parameters": shmParams(inName, 64, 64)},
		},
		"outputs": []any{
			map[string]any{"name": "OUTPUT0", "parameters": shmParams(outName, 0, 64)},
			map[string]any{"name": "OUTPUT1", "parameters": shmParams(outName, 64, 64)},
		},
	}
	code, msg, err := postJSON(base+"/v2/models/simple/infer", body, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("infer with shared memory: %d %s %v", code, msg, err)
	}
	got := make([]byte, 128)
	if err := out.Read(got, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		sum := int32(binary.LittleEndian.Uint32(got[4*i:]))
		diff := int32(binary.LittleEndian.Uint32(got[64+4*i:]))
		if sum != int32(i)+add || diff != int32(i)-add {
			t.Fatalf("element %d: OUTPUT0 %d OUTPUT1 %d (add %d)", i, sum, diff, add)
		}
	}
}

// TestSharedMemory: regions created on the host, registered with the gateway
// in its container and read and written in place by the executor in its own.
func TestSharedMemory(t *testing.T) {
	_, in := region(t, "shm_in", 128)
	_, out := region(t, "shm_out", 128)
	var status []struct {
		Name     string `json:"name"`
		Key      string `json:"key"`
		ByteSize int    `json:"byte_size"`
	}
	if code, err := getJSON(httpBase+"/v2/systemsharedmemory/status", &status); err != nil || code != http.StatusOK {
		t.Fatalf("status: %d %v", code, err)
	}
	names := map[string]bool{}
	for _, s := range status {
		names[s.Name] = true
	}
	if !names["shm_in"] || !names["shm_out"] {
		t.Fatalf("status lists %+v", status)
	}
	for _, add := range []int32{1, 5, -2} {
		inferSimpleShm(t, "shm_in", "shm_out", in, out, add)
	}
}

// TestScaleSpread: `docker compose up --scale executor=3` and requests spread
// over the three, counted by each executor's statistics.
func TestScaleSpread(t *testing.T) {
	e := watchExecutors(t)
	ids := scale(t, e, 3)
	before := e.counts(t, ids, "simple")
	sent := 0
	spread := func() bool {
		for range 30 {
			if err := inferSimple(); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		now := e.counts(t, ids, "simple")
		for _, id := range ids {
			if now[id] == before[id] {
				return false
			}
		}
		return true
	}
	ok := waitFor(time.Minute, spread)
	now := e.counts(t, ids, "simple")
	var total uint64
	for _, id := range ids {
		t.Logf("executor %s: %d of the %d requests", id, now[id]-before[id], sent)
		total += now[id] - before[id]
	}
	if !ok {
		t.Fatalf("requests did not reach all three executors")
	}
	if total != uint64(sent) {
		t.Errorf("the executors counted %d inferences for %d requests", total, sent)
	}
}
