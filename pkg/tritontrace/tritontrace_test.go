package tritontrace

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/tracesetting"
)

func ptr[T any](v T) *T { return &v }

func manager(t *testing.T, file string, v tracesetting.Values) *tracesetting.Manager {
	t.Helper()
	return tracesetting.New(tracesetting.Config{Mode: tracesetting.ModeTriton, File: file, Defaults: v}, "g1")
}

// readRecords parses a trace file as trace_summary.py does.
func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s is not a JSON array: %v\n%s", path, err, raw)
	}
	return out
}

// traceIDs lists the ids of the traces in records, in order of their
// model record.
func traceIDs(recs []map[string]any) []float64 {
	var ids []float64
	for _, r := range recs {
		if _, ok := r["model_name"]; ok {
			ids = append(ids, r["id"].(float64))
		}
	}
	return ids
}

func TestTraceRecordsInTritonsOrder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.json")
	m := manager(t, path, tracesetting.Values{Level: tracesetting.LevelTimestamps | tracesetting.LevelTensors, Rate: 1, Count: -1})
	w := New(m, path, nil)
	tr := w.Start("simple", 1, "req-7")
	if tr == nil || tr.ID != 1 {
		t.Fatalf("first trace: %+v", tr)
	}
	base := time.Unix(0, 1_000_000)
	// Recorded out of order: the file is in Triton's order whatever the
	// order of the calls.
	for i, s := range []Stamp{HTTPSendEnd, HTTPSendStart, RequestEnd, ComputeEnd, ComputeOutputStart, ComputeInputEnd, ComputeStart, QueueStart, RequestStart, HTTPRecvEnd, HTTPRecvStart} {
		tr.Stamp(s, base.Add(time.Duration(100-i)))
	}
	in := make([]byte, 8)
	binary.LittleEndian.PutUint32(in, 7)
	binary.LittleEndian.PutUint32(in[4:], uint32(0xffffffff))
	tr.AddTensor(TensorQueueInput, "INPUT0", "INT32", []int64{1, 2}, in)
	out := make([]byte, 8)
	binary.LittleEndian.PutUint32(out, math.Float32bits(0.1))
	binary.LittleEndian.PutUint32(out[4:], math.Float32bits(1234567))
	tr.AddTensor(TensorBackendOutput, "OUTPUT0", "FP32", []int64{2}, out)
	w.Finish(tr)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, path)
	var order []string
	for _, r := range recs {
		if r["id"].(float64) != 1 {
			t.Fatalf("record of another trace: %v", r)
		}
		switch {
		case r["model_name"] != nil:
			if r["model_name"] != "simple" || r["model_version"].(float64) != 1 || r["request_id"] != "req-7" {
				t.Fatalf("model record %v", r)
			}
			if _, ok := r["parent_id"]; ok {
				t.Fatalf("parent_id without a parent: %v", r)
			}
			order = append(order, "model")
		case r["timestamps"] != nil:
			ts := r["timestamps"].([]any)[0].(map[string]any)
			order = append(order, ts["name"].(string))
		case r["activity"] != nil:
			order = append(order, r["activity"].(string))
			tensor := r["tensor"].(map[string]any)
			var want map[string]any
			if r["activity"] == "TENSOR_QUEUE_INPUT" {
				want = map[string]any{"name": "INPUT0", "data": "7,-1", "shape": "1,2", "dtype": "INT32"}
			} else {
				want = map[string]any{"name": "OUTPUT0", "data": "0.1,1.23457e+06", "shape": "2", "dtype": "FP32"}
			}
			if !reflect.DeepEqual(tensor, want) {
				t.Fatalf("tensor %v, want %v", tensor, want)
			}
		}
	}
	want := []string{"HTTP_RECV_START", "HTTP_RECV_END", "model", "REQUEST_START", "QUEUE_START", "TENSOR_QUEUE_INPUT",
		"COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "TENSOR_BACKEND_OUTPUT", "COMPUTE_END", "REQUEST_END",
		"HTTP_SEND_START", "HTTP_SEND_END"}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("records %v, want %v", order, want)
	}
}

func TestTensorData(t *testing.T) {
	str := func(ss ...string) []byte {
		var b []byte
		for _, s := range ss {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
		return b
	}
	cases := []struct {
		dtype string
		shape []int64
		raw   []byte
		want  string
	}{
		{"BOOL", []int64{3}, []byte{1, 0, 2}, "1,0,1"},
		{"UINT8", []int64{2}, []byte{200, 7}, "200,7"},
		{"INT8", []int64{2}, []byte{0xff, 7}, "-1,7"},
		{"INT64", []int64{1}, binary.LittleEndian.AppendUint64(nil, math.MaxUint64), "-1"},
		{"FP64", []int64{1}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(2.5)), "2.5"},
		{"FP16", []int64{1}, []byte{0, 60}, ""},
		{"BYTES", []int64{2}, str("ab", "c"), `"ab","c"`},
		{"INT32", []int64{4}, []byte{1, 0, 0, 0}, "1"}, // shorter than its shape: what there is
	}
	for _, tc := range cases {
		if got := tensorData(tc.dtype, tc.shape, tc.raw); got != tc.want {
			t.Errorf("%s %v: %q, want %q", tc.dtype, tc.shape, got, tc.want)
		}
	}
}

// At level TIMESTAMPS alone no tensor is recorded; at level TENSORS alone
// no timestamp.
func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		level           tracesetting.Level
		stamps, tensors bool
	}{
		{tracesetting.LevelTimestamps, true, false},
		{tracesetting.LevelTensors, false, true},
	} {
		tr := &Trace{ID: 1, Model: "m", level: tc.level}
		tr.Stamp(RequestStart, time.Unix(0, 5))
		tr.AddTensor(TensorQueueInput, "X", "UINT8", []int64{1}, []byte{1})
		var recs []map[string]any
		if err := json.Unmarshal(append(append([]byte{'['}, tr.appendJSON(nil)...), ']'), &recs); err != nil {
			t.Fatal(err)
		}
		var stamps, tensors bool
		for _, r := range recs {
			stamps = stamps || r["timestamps"] != nil
			tensors = tensors || r["activity"] != nil
		}
		if stamps != tc.stamps || tensors != tc.tensors {
			t.Errorf("level %v: timestamps %v, tensors %v", tc.level.Strings(), stamps, tensors)
		}
	}
}

func finishN(w *Writer, model string, n int) {
	for range n {
		tr := w.Start(model, 1, "")
		tr.Stamp(RequestStart, time.Now())
		tr.Stamp(RequestEnd, time.Now())
		w.Finish(tr)
	}
}

// log_frequency 2: files trace.json.0 and .1 of two traces each as they
// fill, the last trace in .2 at close; trace.json itself is not written.
func TestLogFrequencySplitsFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	w := New(manager(t, path, tracesetting.Values{Level: tracesetting.LevelTimestamps, Rate: 1, Count: -1, LogFrequency: 2}), path, nil)
	finishN(w, "simple", 5)
	if ids := traceIDs(readRecords(t, path+".1")); !reflect.DeepEqual(ids, []float64{3, 4}) {
		t.Fatalf("trace.json.1 holds %v before close", ids)
	}
	if _, err := os.Stat(path + ".2"); err == nil {
		t.Fatal("trace.json.2 written before close")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]float64{{1, 2}, {3, 4}, {5}} {
		if ids := traceIDs(readRecords(t, path+"."+string(rune('0'+i)))); !reflect.DeepEqual(ids, want) {
			t.Fatalf("trace.json.%d holds %v, want %v", i, ids, want)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("trace.json written with log_frequency set")
	}
}

// Rate 3, count 2: the 3rd and 6th requests are traced; when the count has
// run out they are written at once to trace.json.0, and trace_count
// reports 0. Traces gathered under the setting before (count -1) went to
// trace.json when the change replaced it.
func TestRateCountAndReplacedSetting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	m := manager(t, path, tracesetting.Values{Level: tracesetting.LevelTimestamps, Rate: 1, Count: -1})
	w := New(m, path, nil)
	finishN(w, "simple", 2)
	if _, err := m.Update("", tracesetting.Update{Rate: ptr(uint32(3)), Count: ptr(int32(2))}); err != nil {
		t.Fatal(err)
	}
	var traced []int
	for i := 1; i <= 9; i++ {
		if tr := w.Start("simple", 1, ""); tr != nil {
			traced = append(traced, i)
			w.Finish(tr)
		}
	}
	if !reflect.DeepEqual(traced, []int{3, 6}) {
		t.Fatalf("traced requests %v, want [3 6]", traced)
	}
	if ids := traceIDs(readRecords(t, path+".0")); !reflect.DeepEqual(ids, []float64{3, 4}) {
		t.Fatalf("trace.json.0 holds %v before close, want [3 4]", ids)
	}
	for _, s := range m.Report("") {
		if s.Name == "trace_count" && s.Values[0] != "0" {
			t.Fatalf("trace_count %v after the count ran out", s.Values)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := traceIDs(readRecords(t, path)); !reflect.DeepEqual(ids, []float64{1, 2}) {
		t.Fatalf("trace.json holds %v, want [1 2]", ids)
	}
}

// A trace in flight when its setting is replaced is written with its
// setting's others once it ends; an unwritable file is logged, not fatal.
func TestTraceInFlightAcrossChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	m := manager(t, path, tracesetting.Values{Level: tracesetting.LevelTimestamps, Rate: 1, Count: -1})
	w := New(m, path, nil)
	finishN(w, "simple", 1)
	open := w.Start("simple", 1, "")
	if _, err := m.Update("simple", tracesetting.Update{LogFrequency: ptr(uint32(1))}); err != nil {
		t.Fatal(err)
	}
	finishN(w, "simple", 1) // under simple's own setting: trace.json.0
	w.Finish(open)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := traceIDs(readRecords(t, path)); !reflect.DeepEqual(ids, []float64{1, 2}) {
		t.Fatalf("trace.json holds %v, want [1 2]", ids)
	}
	if ids := traceIDs(readRecords(t, path+".0")); !reflect.DeepEqual(ids, []float64{3}) {
		t.Fatalf("trace.json.0 holds %v, want [3]", ids)
	}

	bad := filepath.Join(t.TempDir(), "missing", "trace.json")
	w = New(manager(t, bad, tracesetting.Values{Level: tracesetting.LevelTimestamps, Rate: 1, Count: -1}), bad, nil)
	finishN(w, "simple", 1)
	if err := w.Close(); err != nil {
		t.Fatalf("close after a failed write: %v", err)
	}
}

// A trace's child traces (an ensemble's steps, and theirs) are numbered
// like any trace, name their parent, and are written after it in the
// order of their ids, with the root as one sample; a send per response
// is written after the other timestamps.
func TestChildTracesAndRepeatedSends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	m := manager(t, path, tracesetting.Values{Level: tracesetting.LevelTimestamps, Rate: 1, Count: -1, LogFrequency: 1})
	w := New(m, path, nil)
	root := w.Start("ens", 1, "r")
	root.Spawns()
	a := w.StartChild(root, "outer_step", 1, "r")
	a.Spawns()
	b := w.StartChild(a, "inner_step", 2, "r")
	at := time.Unix(0, 5)
	for _, tr := range []*Trace{root, a, b} {
		tr.Stamp(RequestStart, at)
	}
	root.Append(GRPCSendStart, time.Unix(0, 7))
	root.Append(GRPCSendEnd, time.Unix(0, 8))
	root.Append(GRPCSendStart, time.Unix(0, 9))
	w.Finish(b) // the inner step ends first
	w.Finish(a)
	if _, err := os.Stat(path + ".0"); err == nil {
		t.Fatal("a child trace counted as a sample")
	}
	w.Finish(root)
	recs := readRecords(t, path+".0")
	if got := traceIDs(recs); !reflect.DeepEqual(got, []float64{1, 2, 3}) {
		t.Fatalf("ids %v", got)
	}
	parents := map[float64]any{}
	var stamps []string
	for _, r := range recs {
		if _, ok := r["model_name"]; ok {
			parents[r["id"].(float64)] = r["parent_id"]
		}
		if ts, ok := r["timestamps"].([]any); ok && r["id"].(float64) == 1 {
			stamps = append(stamps, ts[0].(map[string]any)["name"].(string))
		}
	}
	if !reflect.DeepEqual(parents, map[float64]any{1: nil, 2: 1.0, 3: 2.0}) {
		t.Fatalf("parents %v", parents)
	}
	if want := []string{"REQUEST_START", "GRPC_SEND_START", "GRPC_SEND_END", "GRPC_SEND_START"}; !reflect.DeepEqual(stamps, want) {
		t.Fatalf("root's timestamps %v, want %v", stamps, want)
	}
}
