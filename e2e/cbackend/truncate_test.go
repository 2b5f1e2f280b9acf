package cbackend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/shm"
)

// TestTruncatingShmClientUnderACBackend is a client that shrinks its
// object to nothing and grows it back in a loop while requests to a C
// backend read their input from it and write their output into it, in
// place. The executor must live (a C read of a truncated page raises
// SIGBUS), the requests that met the truncation fail with the message the
// Go path gives, and another client's region keeps working throughout.
func TestTruncatingShmClientUnderACBackend(t *testing.T) {
	backendDir, repo := setup(t)
	g := constellation.Standalone(t, repo, "--backend-directory", backendDir, "--load-model", "cid", "--allow-client-shm", "true")
	const size = 4 << 20
	const half = size / 2
	mk := func(name string) (string, *shm.Mapping) {
		key := fmt.Sprintf("/nereid-e2e-ctrunc-%d-%s", os.Getpid(), name)
		m, err := shm.Create(key, size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(); _ = shm.Unlink(key) })
		return key, m
	}
	register := func(name, key string) {
		t.Helper()
		var code int
		var body []byte
		if !constellation.WaitFor(20*time.Second, func() bool {
			code, body = post(t, g.HTTP()+"/v2/systemsharedmemory/region/"+name+"/register", fmt.Sprintf(`{"key":%q,"offset":0,"byte_size":%d}`, key, size))
			return code == 200
		}) {
			t.Fatalf("register %s: %d %s", name, code, body)
		}
	}
	hostileKey, _ := mk("hostile")
	goodKey, good := mk("good")
	for i := range half {
		good.Data[i] = byte(i*13 + 1)
	}
	register("hostile", hostileKey)
	register("good", goodKey)
	body := func(region string) string {
		b, _ := json.Marshal(map[string]any{
			"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{1, half / 4},
				"parameters": map[string]any{"shared_memory_region": region, "shared_memory_offset": 0, "shared_memory_byte_size": half}}},
			"outputs": []any{map[string]any{"name": "OUTPUT0",
				"parameters": map[string]any{"shared_memory_region": region, "shared_memory_offset": half, "shared_memory_byte_size": half}}},
		})
		return string(b)
	}

	stopTruncating := constellation.TruncateLoop(t, shm.Dir+hostileKey, size)

	const unusable = "truncated by its owner while in use; it is unusable until it is unregistered and registered again"
	var ok, refused, faulted atomic.Int64
	var unexpected sync.Map
	var wg sync.WaitGroup
	// Until a request has met the truncation under the backend (the 400),
	// bounded: the loop truncates all the time, so it comes quickly.
	deadline := time.Now().Add(2 * time.Minute)
	for range 3 {
		wg.Go(func() {
			for i := 0; i < 2000 && (faulted.Load() == 0 || i < 40) && time.Now().Before(deadline); i++ {
				code, b := post(t, g.HTTP()+"/v2/models/cid/infer", body("hostile"))
				switch {
				case code == 200:
					ok.Add(1)
				case code == 400 && strings.Contains(string(b), unusable):
					faulted.Add(1)
				case code == 400 && strings.Contains(string(b), "shared memory object '"+hostileKey+"' was truncated by its owner"):
					refused.Add(1) // truncated before the request started
				default:
					unexpected.Store(string(b), code)
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 40; i++ {
			code, b := post(t, g.HTTP()+"/v2/models/cid/infer", body("good"))
			if code != 200 || !bytes.Equal(good.Data[half:], good.Data[:half]) {
				t.Errorf("well-behaved region: %d %s", code, b)
				return
			}
			good.Data[half] ^= 0xff // the next answer must write it again
		}
	})
	wg.Wait()
	truncations := stopTruncating()
	t.Logf("%d truncations; hostile requests: %d answered, %d failed by the fault, %d refused up front", truncations, ok.Load(), faulted.Load(), refused.Load())
	unexpected.Range(func(k, v any) bool {
		t.Errorf("hostile request answered %v %v", v, k)
		return true
	})
	if faulted.Load() == 0 {
		t.Fatal("no request met the truncation while the backend used the region")
	}
	if code, _ := get(t, g.HTTP()+"/v2/health/ready"); code != 200 {
		t.Fatal("the server is not ready after the hostile client")
	}

	// Registered again, the region works: the object is whole again.
	post(t, g.HTTP()+"/v2/systemsharedmemory/region/hostile/unregister", "")
	register("hostile", hostileKey)
	m, err := shm.Map(hostileKey, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := range half {
		m.Data[i] = byte(i*3 + 5)
	}
	if code, b := post(t, g.HTTP()+"/v2/models/cid/infer", body("hostile")); code != 200 || !bytes.Equal(m.Data[half:], m.Data[:half]) {
		t.Fatalf("region registered again: %d %s", code, b)
	}
}
