package handoff

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// useDir points Dir at a fresh directory for the test, so that leak checks
// see only this test's files.
func useDir(t *testing.T) string {
	t.Helper()
	old := Dir
	Dir = t.TempDir()
	t.Cleanup(func() { Dir = old })
	return Dir
}

func files(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(Dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func noLeaks(t *testing.T) {
	t.Helper()
	if f := files(t); len(f) > 0 {
		t.Errorf("files left in %s: %v", Dir, f)
	}
	if n := openExchanges(); n > 0 {
		t.Errorf("%d exchanges left open", n)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>11) ^ seed
	}
	return b
}

func TestRegion(t *testing.T) {
	useDir(t)
	r, err := Create(4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if !ValidName(r.Name()) || !r.Shared() || r.Size() != 4096 {
		t.Fatalf("region %q shared %v size %d", r.Name(), r.Shared(), r.Size())
	}
	copy(r.Bytes(), "hello")
	o, err := Open(r.Name(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Bytes()[:5]) != "hello" {
		t.Fatal("the receiver does not see the sender's bytes")
	}
	o.Bytes()[0] = 'j' // MAP_SHARED both ways
	if r.Bytes()[0] != 'j' {
		t.Fatal("the sender does not see the receiver's write")
	}
	if _, err := Open(r.Name(), 4095); err == nil {
		t.Fatal("Open accepted a wrong size")
	}
	if off, ok := r.Offset(r.Bytes()[100:200]); !ok || off != 100 {
		t.Fatalf("Offset = %d, %v", off, ok)
	}
	if _, ok := r.Offset(o.Bytes()[100:200]); ok {
		t.Fatal("Offset claimed another mapping's bytes")
	}
	if _, ok := r.Offset(make([]byte, 10)); ok {
		t.Fatal("Offset claimed heap bytes")
	}
	o.Unlink()
	if len(files(t)) != 0 {
		t.Fatal("Unlink left the file")
	}
	r.Retain()
	r.Release()
	if r.Bytes() == nil {
		t.Fatal("released with a reference left")
	}
	r.Release()
	o.Release()
	noLeaks(t)

	for _, name := range []string{"", "x", "nereid-handoff-", "nereid-handoff-../etc", "nereid-handoff-1/2", "nereid-handoff-ABC", "nereid-handoff-1\x00"} {
		if ValidName(name) {
			t.Errorf("ValidName(%q)", name)
		}
		if _, err := Open(name, 0); err == nil {
			t.Errorf("Open(%q) succeeded", name)
		}
	}
	if _, err := Open(filePrefix+"1-ab", 10); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open of a missing file: %v", err)
	}
}

func TestCreateWithoutDir(t *testing.T) {
	old := Dir
	Dir = filepath.Join(t.TempDir(), "missing")
	defer func() { Dir = old }()
	if _, err := Create(10, true); err == nil {
		t.Fatal("Create succeeded without a directory")
	}
}

func TestSweep(t *testing.T) {
	useDir(t)
	// A pid that cannot be alive (above pid_max), and our own.
	dead := filepath.Join(Dir, filePrefix+"2147483647-00ff")
	mine := filepath.Join(Dir, filePrefix+strconv.Itoa(os.Getpid())+"-00ff")
	other := filepath.Join(Dir, "unrelated")
	for _, p := range []string{dead, mine, other} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n := Sweep(); n != 1 {
		t.Fatalf("Sweep removed %d files, want 1", n)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatal("the dead process's file is still there")
	}
	for _, p := range []string{mine, other} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("Sweep removed %s", p)
		}
	}
}

func TestDescriptor(t *testing.T) {
	const name0 = filePrefix + "12-ab"
	good := Descriptor{Mode: ModeFile, Name: filePrefix + "12-ab", Size: 100,
		Spans: []Span{{0, SourceFile, 0, 40}, {2, SourceFile, 40, 60}, {1, SourceRequest, 5, 5}}}
	d, err := ParseDescriptor(good.String(), 3, 10)
	if err != nil || d.String() != good.String() {
		t.Fatalf("round trip %q: %v %q", good.String(), err, d.String())
	}
	if d, err := ParseDescriptor("p;abc-1", 0, -1); err != nil || d.Mode != ModeProcess || d.Name != "abc-1" {
		t.Fatalf("process descriptor: %v %+v", err, d)
	}
	kept := Descriptor{Mode: ModeKept, Name: name0, Size: 100, Spans: []Span{{1, SourceFile, 10, 90}}}
	if d, err := ParseDescriptor(kept.String(), 3, -1); err != nil || d.String() != kept.String() {
		t.Fatalf("round trip %q: %v %q", kept.String(), err, d.String())
	}
	if _, err := ParseDescriptor("f;;0", 0, -1); err != nil {
		t.Fatalf("a descriptor without file: %v", err)
	}
	name := filePrefix + "12-ab"
	for _, bad := range []string{
		"", "x", "f", "q;a", "p;", "p;a;b",
		"f;" + name, "f;../x;10", "f;" + name + ";-1", "f;;5",
		"f;" + name + ";10;0:f:0:11",                  // past the end
		"f;" + name + ";10;0:f:11:0",                  // offset past the end
		"f;" + name + ";10;0:f:5:9223372036854775807", // overflow
		"f;" + name + ";10;3:f:0:1",                   // index out of range
		"f;" + name + ";10;0:f:0:1;0:f:1:1",           // twice
		"f;" + name + ";10;0:x:0:1",                   // source
		"f;;0;0:f:0:0",                                // span in no file
		"f;" + name + ";10;0:q:0:20",                  // past the request file
		"f;" + name + ";10;0:f:0",                     // short span
		"f;" + name + ";10;-1:f:0:1",
		"k;;0", // a kept file is named
	} {
		if _, err := ParseDescriptor(bad, 3, 10); err == nil {
			t.Errorf("ParseDescriptor(%q) accepted", bad)
		}
	}
}

func FuzzParseDescriptor(f *testing.F) {
	f.Add("f;nereid-handoff-1-ab;10;0:f:0:5;1:q:2:3", 2, int64(8))
	f.Add("p;abc", 1, int64(-1))
	f.Fuzz(func(t *testing.T, s string, n int, reqSize int64) {
		d, err := ParseDescriptor(s, n, reqSize)
		if err != nil {
			return
		}
		for _, sp := range d.Spans {
			limit := d.Size
			if sp.Source == SourceRequest {
				limit = reqSize
			}
			if sp.Index < 0 || sp.Index >= n || sp.Offset < 0 || sp.Len < 0 || sp.Offset+sp.Len > limit {
				t.Fatalf("accepted span %+v of %q", sp, s)
			}
		}
	})
}

// request builds a request with one input per size, filled with a pattern.
func request(sizes ...int) (*inference.ModelInferRequest, [][]byte) {
	req := &inference.ModelInferRequest{ModelName: "m", ModelVersion: "1"}
	var want [][]byte
	for i, n := range sizes {
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "IN" + strconv.Itoa(i), Datatype: "UINT8", Shape: []int64{int64(n)}})
		b := pattern(n, byte(i))
		req.RawInputContents = append(req.RawInputContents, b)
		want = append(want, b)
	}
	return req, want
}

// wire sends m through protobuf, as the bus does.
func wire[T proto.Message](t *testing.T, m T) T {
	t.Helper()
	return roundTrip(t, m)
}

// echo is an executor that answers each input as an output (an identity
// model), plus one fresh output of freshSize bytes.
func echo(t *testing.T, req *inference.ModelInferRequest, freshSize int) (*inference.ModelInferResponse, *Incoming) {
	t.Helper()
	in, err := Accept(req)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if _, ok := req.Parameters[Param]; ok {
		t.Fatal("Accept left the descriptor in the request")
	}
	resp := &inference.ModelInferResponse{ModelName: "m", ModelVersion: "1"}
	for i, b := range req.RawInputContents {
		resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: "OUT" + strconv.Itoa(i)})
		resp.RawOutputContents = append(resp.RawOutputContents, b)
	}
	resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: "FRESH"})
	resp.RawOutputContents = append(resp.RawOutputContents, pattern(freshSize, 99))
	return resp, in
}

func checkOutputs(t *testing.T, resp *inference.ModelInferResponse, want [][]byte, freshSize int) {
	t.Helper()
	for i, w := range want {
		if !bytes.Equal(resp.RawOutputContents[i], w) {
			t.Fatalf("output %d (%d bytes) differs from its input (%d bytes)", i, len(resp.RawOutputContents[i]), len(w))
		}
	}
	if !bytes.Equal(resp.RawOutputContents[len(want)], pattern(freshSize, 99)) {
		t.Fatal("fresh output differs")
	}
	if _, ok := resp.Parameters[Param]; ok {
		t.Fatal("Finish left the descriptor in the response")
	}
}

func TestRoundTrip(t *testing.T) {
	const threshold = 1000
	old := Threshold
	Threshold = threshold
	defer func() { Threshold = old }()
	sizes := []int{10, 5000, 0, 3000} // small inputs ride the bus
	for _, tc := range []struct {
		name   string
		route  Route
		inBody bool // inputs already in a shared Region (an HTTP body)
	}{
		{"node, inputs copied to a file", RouteNode, false},
		{"node, inputs in the body's file", RouteNode, true},
		{"process", RouteProcess, false},
		{"process, body region", RouteProcess, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useDir(t)
			req, want := request(sizes...)
			var body *Region
			if tc.inBody {
				total := 0
				for _, n := range sizes {
					total += n
				}
				var err error
				if body, err = Create(total, true); err != nil {
					t.Fatal(err)
				}
				off := 0
				for i, b := range req.RawInputContents {
					copy(body.Bytes()[off:], b)
					req.RawInputContents[i] = body.Bytes()[off : off+len(b)]
					off += len(b)
				}
			}
			o, err := Prepare(req, tc.route, body, threshold)
			if err != nil || o == nil {
				t.Fatalf("Prepare: %v %v", o, err)
			}
			for i, b := range req.RawInputContents {
				if (sizes[i] >= threshold) != (len(b) == 0 && sizes[i] > 0) {
					t.Fatalf("input %d (%d bytes) travels with %d bytes on the bus", i, sizes[i], len(b))
				}
			}
			if tc.route == RouteNode && !tc.inBody && len(files(t)) != 1 {
				t.Fatalf("files: %v", files(t))
			}
			body.Release() // the HTTP handler's own reference; Prepare holds one

			got := wire(t, req)
			resp, in := echo(t, got, 4000)
			for i, w := range want {
				if !bytes.Equal(got.RawInputContents[i], w) {
					t.Fatalf("executor input %d differs", i)
				}
			}
			if tc.route == RouteNode && len(files(t)) != 0 {
				t.Fatalf("the request file survived its mapping by both sides: %v", files(t))
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in.Reply(ctx, resp)
			in.Release()
			back := wire(t, resp)
			for i, b := range back.RawOutputContents {
				if i == 0 && len(b) != 10 || i > 0 && len(b) != 0 && i != 2 {
					t.Fatalf("output %d travels with %d bytes on the bus", i, len(b))
				}
			}
			if err := o.Finish(back); err != nil {
				t.Fatal(err)
			}
			checkOutputs(t, back, want, 4000)
			var outBytes int64
			for _, b := range back.RawOutputContents {
				if len(b) >= threshold {
					outBytes += int64(len(b))
				}
			}
			if in, out := o.Bytes(); in != 8000 || out != outBytes || out == 0 {
				t.Errorf("Bytes() = %d, %d; want 8000 inputs and %d outputs handed off", in, out, outBytes)
			}
			if len(files(t)) != 0 {
				t.Fatalf("the response file survived its mapping by both sides: %v", files(t))
			}
			o.Release()
			o.Release()
			noLeaks(t)
		})
	}
}

// TestNoLargeInputs: a request whose inputs are all small still lets the
// executor hand off a large output.
func TestNoLargeInputs(t *testing.T) {
	old := Threshold
	Threshold = 1000
	defer func() { Threshold = old }()
	for _, route := range []Route{RouteNode, RouteProcess} {
		t.Run(route.String(), func(t *testing.T) {
			useDir(t)
			req, want := request(10)
			o, err := Prepare(req, route, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			resp, in := echo(t, wire(t, req), 5000)
			in.Reply(context.Background(), resp)
			in.Release()
			back := wire(t, resp)
			if len(back.RawOutputContents[1]) != 0 {
				t.Fatal("the large output rode the bus")
			}
			if err := o.Finish(back); err != nil {
				t.Fatal(err)
			}
			checkOutputs(t, back, want, 5000)
			o.Release()
			noLeaks(t)
		})
	}
}

// TestPrepareAllocs: a small request to an executor of this process
// carries its descriptor at the cost of the Outgoing (exchange, parameter
// and the descriptor's bytes within it) and the parameters map (two: the
// map and its slots); with the Outgoing the caller's, of the map alone.
func TestPrepareAllocs(t *testing.T) {
	req, _ := request(64)
	n := testing.AllocsPerRun(100, func() {
		req.Parameters = nil
		o, err := Prepare(req, RouteProcess, nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		o.Release()
	})
	if n > 3 {
		t.Fatalf("Prepare: %v allocations, want at most 3", n)
	}
	var outs [202]Outgoing
	i := 0
	n = testing.AllocsPerRun(100, func() {
		req.Parameters = nil
		o, err := PrepareInto(&outs[i], req, RouteProcess, nil, 1000)
		i++
		if err != nil || o == nil {
			t.Fatal(o, err)
		}
		o.Release()
	})
	if n > 2 {
		t.Fatalf("PrepareInto: %v allocations, want at most 2", n)
	}
	// With the descriptor taken out once the request is sent, the map
	// serves the next request. (sync.Pool may drop it, rarely: at a
	// collection, which a hundred small runs seldom meet.)
	req.Parameters = nil
	n = testing.AllocsPerRun(100, func() {
		o, err := PrepareInto(&outs[i], req, RouteProcess, nil, 1000)
		i++
		if err != nil || o == nil || req.Parameters[Param] == nil {
			t.Fatal(o, err)
		}
		o.Release()
		o.Unset(req)
		if req.Parameters != nil {
			t.Fatal("Unset left the map it made")
		}
	})
	if n > 0.5 {
		t.Fatalf("PrepareInto and Unset: %v allocations, want none", n)
	}
	// A map of the client's stays, without the descriptor.
	req.Parameters = map[string]*inference.InferParameter{"x": {}}
	o, err := Prepare(req, RouteProcess, nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	o.Release()
	o.Unset(req)
	if len(req.Parameters) != 1 || req.Parameters["x"] == nil {
		t.Fatalf("Unset changed the client's parameters: %v", req.Parameters)
	}
	noLeaks(t)
}

func TestBusRouteAndReservedParam(t *testing.T) {
	req, _ := request(5000)
	if o, err := Prepare(req, RouteBus, nil, 1000); o != nil || err != nil || req.Parameters[Param] != nil {
		t.Fatalf("RouteBus: %v %v %v", o, err, req.Parameters)
	}
	req.Parameters = map[string]*inference.InferParameter{Param: {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "p;x"}}}
	for _, r := range []Route{RouteBus, RouteNode, RouteProcess} {
		if _, err := Prepare(req, r, nil, 1000); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Fatalf("a client's %s parameter was accepted: %v", Param, err)
		}
	}
}

// TestGatewayGivesUp: the gateway's request fails before the executor
// takes the tensors (no responders, timeout): Release leaves nothing, and a
// late executor finds nothing.
func TestGatewayGivesUp(t *testing.T) {
	for _, route := range []Route{RouteNode, RouteProcess} {
		t.Run(route.String(), func(t *testing.T) {
			useDir(t)
			req, _ := request(5000)
			o, err := Prepare(req, route, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			late := wire(t, req)
			o.Release()
			noLeaks(t)
			if _, err := Accept(late); err == nil {
				t.Fatal("a late executor got tensors the gateway gave up")
			}
		})
	}
}

// TestExecutorRepliesTooLate: the executor answers after the gateway gave
// up. In-process outputs are simply dropped; a response file is removed
// once the request's deadline has passed.
func TestExecutorRepliesTooLate(t *testing.T) {
	oldT, oldG := Threshold, orphanGrace
	Threshold, orphanGrace = 1000, 50*time.Millisecond
	defer func() { Threshold, orphanGrace = oldT, oldG }()
	for _, route := range []Route{RouteNode, RouteProcess} {
		t.Run(route.String(), func(t *testing.T) {
			useDir(t)
			req, _ := request(10)
			o, err := Prepare(req, route, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			resp, in := echo(t, wire(t, req), 5000)
			o.Release() // the gateway's deadline passed
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			in.Reply(ctx, resp)
			in.Release()
			if route == RouteNode && len(files(t)) != 1 {
				t.Fatalf("files: %v", files(t))
			}
			deadline := time.Now().Add(5 * time.Second)
			for len(files(t)) > 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			noLeaks(t)
		})
	}
}

// TestAttachments: a region attached to a request is found again, and
// released when the request is dropped without anyone taking it.
func TestAttachments(t *testing.T) {
	useDir(t)
	r, err := Create(100, true)
	if err != nil {
		t.Fatal(err)
	}
	req := &inference.ModelInferRequest{}
	AttachRegion(req, r)
	if got := TakeRegion(req); got != r {
		t.Fatal("TakeRegion did not return the attached region")
	}
	if TakeRegion(req) != nil {
		t.Fatal("taken twice")
	}
	AttachRegion(req, r) // dropped with req
	req = nil
	deadline := time.Now().Add(5 * time.Second)
	for len(files(t)) > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	noLeaks(t)
	if n := attachedCount(); n != 0 {
		t.Fatalf("%d attachments left", n)
	}
}

// TestDevShm runs a round trip through the real /dev/shm.
func TestDevShm(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	req, want := request(3 << 20)
	o, err := Prepare(req, RouteNode, nil, DefaultThreshold)
	if err != nil {
		t.Fatal(err)
	}
	resp, in := echo(t, wire(t, req), 2<<20)
	in.Reply(context.Background(), resp)
	in.Release()
	back := wire(t, resp)
	if err := o.Finish(back); err != nil {
		t.Fatal(err)
	}
	checkOutputs(t, back, want, 2<<20)
	o.Release()
	matches, _ := filepath.Glob(filepath.Join(Dir, filePrefix+strconv.Itoa(os.Getpid())+"-*"))
	if len(matches) > 0 {
		t.Fatalf("left in /dev/shm: %v", matches)
	}
}

func TestNewAnon(t *testing.T) {
	r, err := NewAnon(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if r.Shared() || r.Size() != 1<<20 {
		t.Fatalf("shared %v size %d", r.Shared(), r.Size())
	}
	r.Bytes()[1<<20-1] = 7
	if off, ok := r.Offset(r.Bytes()[10:20]); !ok || off != 10 {
		t.Fatal("Offset")
	}
	r.Release()
	if r.Bytes() != nil {
		t.Fatal("not unmapped")
	}
}

// TestUndo: inputs handed off can be put back for the bus, until an
// executor of this process has taken them.
func TestUndo(t *testing.T) {
	useDir(t)
	for _, route := range []Route{RouteNode, RouteProcess} {
		t.Run(route.String(), func(t *testing.T) {
			req, want := request(10, 5000, 3000)
			o, err := Prepare(req, route, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			late := wire(t, req)
			if !o.Undo(req) {
				t.Fatal("Undo refused")
			}
			if _, ok := req.Parameters[Param]; ok {
				t.Fatal("the descriptor stayed")
			}
			for i, w := range want {
				if !bytes.Equal(req.RawInputContents[i], w) {
					t.Fatalf("input %d not put back", i)
				}
			}
			if route == RouteProcess {
				if _, err := Accept(late); err == nil {
					t.Fatal("an executor took tensors the gateway took back")
				}
			}
			o.Release()
			noLeaks(t)
		})
	}
	req, _ := request(5000)
	o, _ := Prepare(req, RouteProcess, nil, 1000)
	in, err := Accept(wire(t, req))
	if err != nil {
		t.Fatal(err)
	}
	if o.Undo(req) {
		t.Fatal("Undo after the executor took the tensors")
	}
	in.Release()
	o.Release()
	noLeaks(t)
}

// TestKeptFiles: a response file kept for later requests (an ensemble
// step's output that the next steps read) is named by them as it is, with
// no copy, by each of them; a receiver maps it privately (its backend's
// writes into its inputs change no other reader's bytes) and leaves it in
// place; an output that lies in it is copied into the response's own
// file; the file goes once the last reference is released.
func TestKeptFiles(t *testing.T) {
	const threshold = 1000
	old := Threshold
	Threshold = threshold
	defer func() { Threshold = old }()
	useDir(t)

	// Step one: its output comes back in a file the gateway keeps.
	req, _ := request(5000)
	o1, err := Prepare(req, RouteNode, nil, threshold)
	if err != nil {
		t.Fatal(err)
	}
	o1.KeepOutputs()
	got := wire(t, req)
	resp, in := echo(t, got, 3000)
	in.Reply(context.Background(), resp)
	in.Release()
	resp = wire(t, resp)
	if err := o1.Finish(resp); err != nil {
		t.Fatal(err)
	}
	AttachResponse(resp, o1)
	var kept *Region
	for _, r := range ResponseRegions(resp) {
		if _, ok := r.Offset(resp.RawOutputContents[1]); ok {
			kept = r
		} else {
			r.Release()
		}
	}
	if kept == nil || !kept.Kept() {
		t.Fatalf("the response's file is not kept: %v", kept)
	}
	if _, ok := kept.Offset(resp.RawOutputContents[1]); !ok {
		t.Fatal("the fresh output does not lie in the kept file")
	}
	fresh := bytes.Clone(resp.RawOutputContents[1])

	// Two later steps read the fresh output: both name the kept file.
	for i := range 2 {
		next := &inference.ModelInferRequest{ModelName: "m", ModelVersion: "1",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN0", Datatype: "UINT8", Shape: []int64{3000}}},
			RawInputContents: [][]byte{resp.RawOutputContents[1]}}
		o, err := Prepare(next, RouteNode, kept, threshold)
		if err != nil || o.Mode() != ModeKept {
			t.Fatalf("step %d: Prepare %v, mode %c", i, err, o.Mode())
		}
		if sent, _ := o.Bytes(); sent != 3000 {
			t.Fatalf("step %d: %d bytes handed off, want 3000", i, sent)
		}
		if n := len(files(t)); n != 1 {
			t.Fatalf("step %d: %d files, want the kept one alone: a copy was made", i, n)
		}
		got := wire(t, next)
		r, in := echo(t, got, 0)
		got.RawInputContents[0][0] ^= 0xff // the backend writes into its input
		in.Reply(context.Background(), r)
		in.Release()
		r = wire(t, r)
		if err := o.Finish(r); err != nil {
			t.Fatal(err)
		}
		if want := append([]byte{fresh[0] ^ 0xff}, fresh[1:]...); !bytes.Equal(r.RawOutputContents[0], want) {
			t.Fatalf("step %d: output differs from what the backend made", i)
		}
		if !bytes.Equal(resp.RawOutputContents[1], fresh) {
			t.Fatalf("step %d: the receiver's write reached the kept file", i)
		}
		o.Release()
		if n := len(files(t)); n != 1 {
			t.Fatalf("step %d: %d files after the step, want the kept one", i, n)
		}
	}
	kept.Release()
	TakeResponse(resp).Release()
	noLeaks(t)
}
