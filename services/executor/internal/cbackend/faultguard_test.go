//go:build cgo

package cbackend

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/shm"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// region creates a client's object of size bytes and maps it as the
// executor does; it is removed when the test ends.
func region(t *testing.T, name string, size int) (*shm.Mapping, string) {
	t.Helper()
	key := fmt.Sprintf("/nereid-faultguard-%d-%s", os.Getpid(), name)
	m, err := shm.Create(key, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(); _ = shm.Unlink(key) })
	return m, shm.Dir + key
}

// identityInstance loads the identity test backend (which installs the
// fault guard) and returns one instance.
func identityInstance(t *testing.T) backend.Instance {
	t.Helper()
	l := loader(t)
	f, ok := l.Find("nidentity", t.TempDir(), 1)
	if !ok {
		t.Fatal("nidentity not found")
	}
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Finalize() })
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: "id", Version: 1, Dir: t.TempDir(), Config: identityConfig("id", "nidentity")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Finalize() })
	in, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "id_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: &statsRecorder{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Finalize() })
	return in
}

// echo runs one identity request whose input is in and whose output is
// bound to out (nil: a private buffer); it returns the response.
func echo(t *testing.T, inst backend.Instance, in, out []byte) *backend.Response {
	t.Helper()
	return echoWith(t, inst, in, out, nil)
}

func echoWith(t *testing.T, inst backend.Instance, in, out []byte, params map[string]any) *backend.Response {
	t.Helper()
	var got *backend.Response
	r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) { got = resp })
	r.BatchSize = 1
	r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, int64(len(in) / 4)}, Data: in}}
	r.RequestedOutputs = []string{"OUTPUT0"}
	r.Parameters = params
	if out != nil {
		r.OutputPlace = func(name string, size int) []byte {
			if name != "OUTPUT0" || size > len(out) {
				return nil
			}
			return out[:size:size]
		}
	}
	if err := inst.Execute(context.Background(), []*backend.Request{r}); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("no response")
	}
	return got
}

func TestFaultGuard(t *testing.T) {
	shm.SetWatcher(ShmWatcher())
	defer shm.SetWatcher(nil)
	inst := identityInstance(t)
	const size = 1 << 20
	const half = size / 2

	t.Run("InPlace", func(t *testing.T) {
		m, _ := region(t, "inplace", size)
		if !m.Protected() {
			t.Fatal("a mapping made with the watcher set is not protected once a C backend is loaded")
		}
		for i := range half {
			m.Data[i] = byte(i * 7)
		}
		resp := echo(t, inst, m.Data[:half], m.Data[half:])
		if resp.Err != nil || len(resp.Outputs) != 1 {
			t.Fatalf("%+v", resp)
		}
		o := resp.Outputs[0].Data
		if len(o) != half || unsafe.SliceData(o) != unsafe.SliceData(m.Data[half:]) {
			t.Fatal("the output was not produced in its region")
		}
		if !bytes.Equal(m.Data[half:], m.Data[:half]) {
			t.Fatal("the output region does not hold the input")
		}
	})

	t.Run("TruncatedUnderC", func(t *testing.T) {
		m, path := region(t, "truncated", size)
		before := AbsorbedFaults()
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		// The backend's memcpy reads pages past the object's end: SIGBUS in
		// C, absorbed; the executor lives and the mapping reads poisoned.
		resp := echo(t, inst, m.Data[:half], m.Data[half:])
		if resp.Err != nil {
			t.Fatalf("%v", resp.Err)
		}
		if AbsorbedFaults() == before || !m.Poisoned() {
			t.Fatalf("no fault absorbed (%d before, %d after), poisoned %v", before, AbsorbedFaults(), m.Poisoned())
		}
		if err := m.Check(); err == nil {
			t.Fatal("a poisoned mapping passes Check")
		}
		// Go code reading it afterwards sees the zero pages, and the error.
		if err := m.Read(make([]byte, 16), 0); err == nil {
			t.Fatal("reading a poisoned mapping succeeded")
		}
	})

	t.Run("TruncatedUnderAThreadOfTheBackend", func(t *testing.T) {
		// The copy runs on a thread the backend started, which the Go
		// runtime does not know: its fault is absorbed all the same.
		m, path := region(t, "thread", size)
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		resp := echoWith(t, inst, m.Data[:half], m.Data[half:], map[string]any{"copy_on_thread": true})
		if resp.Err != nil || !m.Poisoned() {
			t.Fatalf("err %v, poisoned %v", resp.Err, m.Poisoned())
		}
	})

	t.Run("TruncatedUnderGo", func(t *testing.T) {
		m, path := region(t, "gotruncated", size)
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		// A guarded Go read of a watched mapping: the C handler absorbs the
		// fault, Read reports the poisoning.
		if err := m.Read(make([]byte, 4096), 0); err == nil || !m.Poisoned() {
			t.Fatalf("err %v, poisoned %v", err, m.Poisoned())
		}
	})

	t.Run("OtherFaultsReachGo", func(t *testing.T) {
		// An unwatched mapping: its SIGBUS goes through the C handler to the
		// Go runtime's, which turns it into Guard's error.
		shm.SetWatcher(nil)
		m, path := region(t, "unwatched", size)
		shm.SetWatcher(ShmWatcher())
		if m.Protected() {
			t.Fatal("an unwatched mapping says it is protected")
		}
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		before := AbsorbedFaults()
		// Read copies under Guard: the runtime's fault becomes its error and
		// poisons the mapping.
		if err := m.Read(make([]byte, 4096), 0); err == nil || !m.Poisoned() {
			t.Fatalf("Read of a truncated unwatched mapping: err %v, poisoned %v", err, m.Poisoned())
		}
		var b []byte
		err := shm.Guard(func() error { b = append(b, m.Data[8192:8200]...); return nil })
		if f, ok := shm.AsFault(err); !ok || !m.Contains(f.Addr) {
			t.Fatalf("Guard returned %v (%v), want the fault in the mapping", err, b)
		}
		if AbsorbedFaults() != before {
			t.Fatal("the C handler absorbed a fault outside every watched mapping")
		}
	})

	t.Run("TruncatingInALoop", func(t *testing.T) {
		// The client shrinks and regrows its object while the backend reads
		// and writes it: every request ends, the process lives, and the
		// mapping is poisoned once a fault happened.
		m, path := region(t, "loop", size)
		stop := make(chan struct{})
		var truncations atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = os.Truncate(path, 0)
				_ = os.Truncate(path, size)
				truncations.Add(1)
			}
		})
		before := AbsorbedFaults()
		for i := 0; i < 300 && !m.Poisoned(); i++ {
			if resp := echo(t, inst, m.Data[:half], m.Data[half:]); resp.Err != nil {
				t.Fatalf("%v", resp.Err)
			}
		}
		close(stop)
		wg.Wait()
		t.Logf("%d truncations, %d faults absorbed, poisoned %v", truncations.Load(), AbsorbedFaults()-before, m.Poisoned())
		if (AbsorbedFaults() > before) != m.Poisoned() {
			t.Fatal("faults absorbed and poisoning disagree")
		}
	})
}
