package cbackend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
	"github.com/nereid-io/nereid/pkg/shm"
)

// TestInPlaceShmUnderACBackendUnderLoad sends requests whose input and
// output lie in one system region (read and written in place by the C
// identity backend) from several clients at once: the server answers every
// one, correctly, and lives. Many backend calls during collections are
// what once killed the executor here, when the pointers it returned
// through a backend's uninitialized out-parameters ran the write barrier
// over stack garbage ("found pointer to free object"; see
// services/executor/internal/cbackend/outparam.go).
func TestInPlaceShmUnderACBackendUnderLoad(t *testing.T) {
	backendDir, repo := setup(t)
	g := constellation.Standalone(t, repo, "--backend-directory", backendDir, "--load-model", "cid", "--allow-client-shm", "true")
	const size = 4 << 20
	const half = size / 2
	key := fmt.Sprintf("/nereid-e2e-inplace-%d", os.Getpid())
	m, err := shm.Create(key, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(); _ = shm.Unlink(key) })
	for i := range half {
		m.Data[i] = byte(i*7 + 3)
	}
	if !constellation.WaitFor(20*time.Second, func() bool {
		code, _ := post(t, g.HTTP()+"/v2/systemsharedmemory/region/r/register", fmt.Sprintf(`{"key":%q,"offset":0,"byte_size":%d}`, key, size))
		return code == 200
	}) {
		t.Fatal("register")
	}
	b, _ := json.Marshal(map[string]any{
		"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "FP32", "shape": []int{1, half / 4},
			"parameters": map[string]any{"shared_memory_region": "r", "shared_memory_offset": 0, "shared_memory_byte_size": half}}},
		"outputs": []any{map[string]any{"name": "OUTPUT0",
			"parameters": map[string]any{"shared_memory_region": "r", "shared_memory_offset": half, "shared_memory_byte_size": half}}},
	})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 60 {
				if code, body := post(t, g.HTTP()+"/v2/models/cid/infer", string(b)); code != 200 {
					t.Errorf("%d %s", code, body)
					return
				}
			}
		})
	}
	wg.Wait()
	if !bytes.Equal(m.Data[half:], m.Data[:half]) {
		t.Fatal("the output region does not hold the input")
	}
}
