package handoff

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// processID tells this process's exchange keys from another's, so that a
// key that reached the wrong process is refused instead of misread.
var processID = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// exchange is one request's tensors handed between a gateway and an
// executor of the same process.
type exchange struct {
	mu      sync.Mutex
	inputs  [][]byte // by input index; nil: not handed off
	region  *Region  // reference on the memory the inputs lie in; moves to the taker
	outputs [][]byte // by output index; set by the executor
	taken   bool     // the executor took the inputs
	closed  bool     // the gateway is done; outputs can no longer be set
}

var exchanges = struct {
	sync.Mutex
	m   map[string]*exchange
	seq atomic.Uint64
}{m: map[string]*exchange{}}

// paramBuf holds an exchange's descriptor: "p;", the process id (16), '-'
// and a sequence number in base 36 (at most 13).
type paramBuf [40]byte

// openExchange registers ex and returns its descriptor (Descriptor's
// "p;<key>"), written into buf, which the string aliases: every request to
// an executor of this process carries one, and buf lives in the request's
// Outgoing, so it costs no allocation of its own. buf must not change
// while the string is in use (an Outgoing is never reused).
func openExchange(ex *exchange, buf *paramBuf) string {
	d := append(append(append(buf[:0], "p;"...), processID...), '-')
	d = strconv.AppendUint(d, exchanges.seq.Add(1), 36)
	param := unsafe.String(unsafe.SliceData(d), len(d))
	key := param[len("p;"):]
	exchanges.Lock()
	exchanges.m[key] = ex
	exchanges.Unlock()
	return param
}

// lookupExchange finds an open exchange by key.
func lookupExchange(key string) *exchange {
	exchanges.Lock()
	defer exchanges.Unlock()
	return exchanges.m[key]
}

// closeExchange removes the exchange; its region reference is released
// unless the executor took it.
func closeExchange(key string, ex *exchange) {
	exchanges.Lock()
	delete(exchanges.m, key)
	exchanges.Unlock()
	ex.mu.Lock()
	ex.closed = true
	var r *Region
	if !ex.taken {
		r, ex.region = ex.region, nil
	}
	ex.mu.Unlock()
	r.Release()
}

// openExchanges counts exchanges not yet closed (tests check for leaks).
func openExchanges() int {
	exchanges.Lock()
	defer exchanges.Unlock()
	return len(exchanges.m)
}

var localExecutors sync.Map // executor id -> struct{}

// RegisterExecutor records that executor id runs in this process, so that a
// gateway of the same process hands tensors to it as slices. The returned
// func unregisters it.
func RegisterExecutor(id string) (unregister func()) {
	localExecutors.Store(id, struct{}{})
	return func() { localExecutors.Delete(id) }
}

// LocalExecutor reports whether executor id runs in this process.
func LocalExecutor(id string) bool {
	_, ok := localExecutors.Load(id)
	return ok
}
