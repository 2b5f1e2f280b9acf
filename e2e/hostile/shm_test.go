package hostile

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/shm"
)

// TestTruncatingShmClient is a client that registers a region, then
// shrinks its object to nothing and grows it back in a loop while four
// threads infer with inputs in it. The server must not die (a read of a
// truncated mapping raises SIGBUS), must answer those requests with a clear
// error or a result, and must keep serving a well-behaved client's region
// throughout; the faulted region works again once registered anew.
func TestTruncatingShmClient(t *testing.T) {
	g := standalone(t, "--allow-client-shm", "true")
	const size = 1 << 20
	pid := os.Getpid()
	mk := func(name string) (string, *shm.Mapping) {
		key := fmt.Sprintf("/nereid-hostile-%d-%s", pid, name)
		m, err := shm.Create(key, size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(); _ = shm.Unlink(key) })
		return key, m
	}
	fill := func(b []byte) {
		for i := range 16 {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(i))
			binary.LittleEndian.PutUint32(b[64+4*i:], 1)
		}
	}
	register := func(name, key string) {
		if code, msg := post(t, g.HTTP()+"/v2/systemsharedmemory/region/"+name+"/register", map[string]any{"key": key, "offset": 0, "byte_size": size}); code != 200 {
			t.Fatalf("register %s: %d %s", name, code, msg)
		}
	}
	hostileKey, _ := mk("truncated")
	goodKey, good := mk("good")
	fill(good.Data)
	register("hostile", hostileKey)
	register("good", goodKey)

	inferBody := func(region string) map[string]any {
		return map[string]any{"inputs": []map[string]any{
			{"name": "INPUT0", "datatype": "INT32", "shape": []int{1, 16}, "parameters": shmParams(region, 0, 64)},
			{"name": "INPUT1", "datatype": "INT32", "shape": []int{1, 16}, "parameters": shmParams(region, 64, 64)},
		}}
	}
	goodAnswer := func(code int, body string) error {
		if code != 200 {
			return errf("%d %s", code, body)
		}
		var resp struct {
			Outputs []struct {
				Name string  `json:"name"`
				Data []int32 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil || len(resp.Outputs) != 2 {
			return errf("bad answer %s", body)
		}
		for _, o := range resp.Outputs {
			for i, v := range o.Data {
				want := int32(i) + 1
				if o.Name == "OUTPUT1" {
					want = int32(i) - 1
				}
				if v != want {
					return errf("%s[%d] = %d, want %d", o.Name, i, v, want)
				}
			}
		}
		return nil
	}

	// The hostile client: shrink to nothing, grow back, rewrite, repeat.
	stopTruncating := constellation.TruncateLoop(t, shm.Dir+hostileKey, size)

	const perThread = 150
	var hostileOK, hostileErr atomic.Int64
	var unexpected sync.Map
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range perThread {
				code, body := post(t, g.HTTP()+"/v2/models/simple/infer", inferBody("hostile"))
				switch {
				case code == 200:
					hostileOK.Add(1)
				case code == 400 && strings.Contains(body, "truncated by its owner while in use; it is unusable until it is unregistered and registered again"),
					code == 400 && strings.Contains(body, "shared memory object '"+hostileKey+"' was truncated by its owner"):
					hostileErr.Add(1)
				default:
					unexpected.Store(body, code)
				}
			}
		})
	}
	// Sequence requests (each a whole sequence) with INPUT and OUTPUT in the
	// truncated region: the sequence path must survive it as well. A
	// request batched with a faulting one may be refused as interrupted
	// (its sequence's state may have moved), never crash anything.
	var seqID atomic.Uint64
	seqID.Store(1000)
	seqBody := func(region string) map[string]any {
		return map[string]any{
			"parameters": map[string]any{"sequence_id": seqID.Add(1), "sequence_start": true, "sequence_end": true},
			"inputs":     []map[string]any{{"name": "INPUT", "datatype": "INT32", "shape": []int{1, 1}, "parameters": shmParams(region, 128, 4)}},
			"outputs":    []map[string]any{{"name": "OUTPUT", "parameters": shmParams(region, 256, 4)}},
		}
	}
	for range 2 {
		wg.Go(func() {
			for range perThread / 2 {
				code, body := post(t, g.HTTP()+"/v2/models/simple_sequence/infer", seqBody("hostile"))
				switch {
				case code == 200:
					hostileOK.Add(1)
				case code == 400 && strings.Contains(body, "truncated by its owner while in use"),
					code == 400 && strings.Contains(body, "shared memory object '"+hostileKey+"' was truncated by its owner"),
					code == 503 && strings.Contains(body, "interrupted by a fault in another request's shared memory region"):
					hostileErr.Add(1)
				default:
					unexpected.Store(body, code)
				}
			}
		})
	}
	// A well-behaved client of the same server, all along.
	wg.Go(func() {
		for range perThread {
			if err := goodAnswer(post(t, g.HTTP()+"/v2/models/simple/infer", inferBody("good"))); err != nil {
				t.Errorf("well-behaved region: %v", err)
				return
			}
		}
	})
	wg.Wait()
	truncations := stopTruncating()
	t.Logf("%d truncations; hostile requests: %d answered, %d refused with a clear error", truncations, hostileOK.Load(), hostileErr.Load())
	alive(t, g)
	unexpected.Range(func(k, v any) bool {
		t.Errorf("hostile request answered %v %v", v, k)
		return true
	})

	// Registered again over the same object, the region works.
	post(t, g.HTTP()+"/v2/systemsharedmemory/region/hostile/unregister", "")
	register("hostile", hostileKey)
	m, err := shm.Map(hostileKey, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fill(m.Data)
	if err := goodAnswer(post(t, g.HTTP()+"/v2/models/simple/infer", inferBody("hostile"))); err != nil {
		t.Fatalf("region registered again: %v", err)
	}
	if err := goodAnswer(post(t, g.HTTP()+"/v2/models/simple/infer", inferBody("good"))); err != nil {
		t.Fatalf("well-behaved region afterwards: %v", err)
	}
}
