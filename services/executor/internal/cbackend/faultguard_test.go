//go:build cgo

package cbackend

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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

// TestFaultGuardUnwatchRacingAFault closes watched mappings while another
// thread faults in them, and maps fresh memory (a canary) over each
// range at once, as the allocator of the heap or another region may: the
// handler of a fault that began before Unwatch must never put its zero
// pages over the canary, nor leave a mapping of its own in the freed
// range.
func TestFaultGuardUnwatchRacingAFault(t *testing.T) {
	if err := installFaultGuard(); err != nil {
		t.Fatal(err)
	}
	shm.SetWatcher(ShmWatcher())
	defer shm.SetWatcher(nil)
	const size = 16 << 12
	rounds := 1500
	if testing.Short() {
		rounds = 200
	}
	var wg sync.WaitGroup
	var canaries, occupied, zeroed atomic.Int64
	for w := range 4 {
		key := fmt.Sprintf("/nereid-faultguard-%d-race%d", os.Getpid(), w)
		obj, err := shm.Create(key, size)
		if err != nil {
			t.Fatal(err)
		}
		_ = obj.Close()
		t.Cleanup(func() { _ = shm.Unlink(key) })
		path := shm.Dir + key
		wg.Go(func() {
			for range rounds {
				if err := os.Truncate(path, size); err != nil {
					t.Error(err)
					return
				}
				m, err := shm.Map(key, 0, size)
				if err != nil {
					t.Error(err)
					return
				}
				if !m.Protected() {
					t.Error("a mapping made with the watcher set is not protected")
					return
				}
				data := m.Data
				if err := os.Truncate(path, 0); err != nil {
					t.Error(err)
					return
				}
				var ready, done atomic.Bool
				go func() {
					defer done.Store(true)
					ready.Store(true)
					// A fault: absorbed (zeros), or, once the range is
					// unmapped, Guard's error; the canary reads as itself.
					_ = shm.Guard(func() error {
						var sum byte
						for off := 0; off < size; off += 1 << 12 {
							sum += data[off]
						}
						_ = sum
						return nil
					})
				}()
				for !ready.Load() {
					runtime.Gosched()
				}
				start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
				if err := m.Close(); err != nil {
					t.Error(err)
					return
				}
				canary, err := mapAt(start, size)
				if err != nil {
					// Something holds the freed range already.
					occupied.Add(1)
					for !done.Load() {
						runtime.Gosched()
					}
					continue
				}
				for i := range canary {
					canary[i] = 0xaa
				}
				canaries.Add(1)
				for !done.Load() {
					runtime.Gosched()
				}
				for off := 0; off < size; off += 1 << 12 {
					if canary[off] != 0xaa {
						zeroed.Add(1)
						break
					}
				}
				_ = syscall.Munmap(canary)
			}
		})
	}
	wg.Wait()
	t.Logf("%d canaries mapped, %d freed ranges found taken, %d canaries overwritten", canaries.Load(), occupied.Load(), zeroed.Load())
	if zeroed.Load() > 0 {
		t.Fatalf("the fault guard put pages over memory mapped after Unwatch (%d times)", zeroed.Load())
	}
}

// mapAt maps size bytes of private memory at addr exactly, failing when
// anything is mapped there (MAP_FIXED_NOREPLACE).
func mapAt(addr uintptr, size int) ([]byte, error) {
	const mapFixedNoreplace = 0x100000
	p, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(size), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|mapFixedNoreplace, ^uintptr(0), 0)
	if errno != 0 {
		return nil, errno
	}
	if p != addr {
		// A kernel before 4.17 treats the flag as a hint.
		_, _, _ = syscall.Syscall(syscall.SYS_MUNMAP, p, uintptr(size), 0)
		return nil, syscall.EEXIST
	}
	// Memory the kernel mapped, which the collector never moves or frees.
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&p)), size), nil
}

// TestFaultGuardIgnoresSentSIGBUS sends the process a SIGBUS (as kill does)
// whose siginfo names an address in a watched mapping: it is no fault, so
// the guard leaves the mapping alone and passes the signal on to the Go
// runtime, which delivers it to os/signal.
func TestFaultGuardIgnoresSentSIGBUS(t *testing.T) {
	if err := installFaultGuard(); err != nil {
		t.Fatal(err)
	}
	shm.SetWatcher(ShmWatcher())
	defer shm.SetWatcher(nil)
	m, _ := region(t, "sent", 1<<16)
	for i := range m.Data {
		m.Data[i] = 0x5a
	}
	got := make(chan os.Signal, 1)
	signal.Notify(got, syscall.SIGBUS)
	defer signal.Stop(got)
	before := AbsorbedFaults()

	// siginfo_t on Linux: si_signo, si_errno, si_code, then the union at
	// offset 16, where a fault's si_addr lies (and a sender's pid and uid).
	var info [128]byte
	*(*int32)(unsafe.Pointer(&info[0])) = int32(syscall.SIGBUS)
	*(*int32)(unsafe.Pointer(&info[8])) = 0 // SI_USER, as kill(2) sends it
	*(*uintptr)(unsafe.Pointer(&info[16])) = uintptr(unsafe.Pointer(&m.Data[4096]))
	// To this thread: the kernel takes a siginfo that claims SI_USER only
	// from a thread signalling itself.
	runtime.LockOSThread()
	_, _, errno := syscall.Syscall6(syscall.SYS_RT_TGSIGQUEUEINFO, uintptr(os.Getpid()), uintptr(syscall.Gettid()), uintptr(syscall.SIGBUS), uintptr(unsafe.Pointer(&info[0])), 0, 0)
	runtime.UnlockOSThread()
	if errno != 0 {
		t.Fatal(errno)
	}
	select {
	case <-got:
	case <-time.After(time.Minute):
		t.Fatal("the sent SIGBUS never reached os/signal")
	}
	if AbsorbedFaults() != before || m.Poisoned() {
		t.Fatalf("a sent SIGBUS was absorbed as a fault (%d absorbed before, %d after; poisoned %v)", before, AbsorbedFaults(), m.Poisoned())
	}
	for i, b := range m.Data {
		if b != 0x5a {
			t.Fatalf("byte %d of the mapping is %#x after a sent SIGBUS", i, b)
		}
	}
}
