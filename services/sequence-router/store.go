package seqrouter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/backoff"
	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/services/sequence-router/internal/redislease"
)

// store keeps what another router needs to take over: per model version,
// the bindings of sequences to executor instance slots, the backlog order,
// and the lease that makes one router the one serving the model.
type store interface {
	// model returns the seqbatch.Store of one model version for the holder
	// of lease epoch: its writes fail with errLeaseLost once another router
	// holds the model's lease (fencing a router that missed its renewal).
	model(key, owner string, epoch uint64) seqbatch.Store
	// load reads a model version's bindings and backlog (oldest first).
	load(ctx context.Context, key string) (map[seqbatch.ID]seqbatch.SlotRef, []seqbatch.ID, error)
	// acquire takes the model's lease for owner when nobody holds it, with
	// an epoch above every epoch handed out before and at least floor
	// (failover.Record.Acquire). It returns the epoch, 0 when another router
	// holds the lease.
	acquire(ctx context.Context, key, owner string, floor uint64, ttl time.Duration) (uint64, error)
	// renew extends the lease owner holds at epoch, or takes it back at
	// that epoch when nobody holds it and no newer epoch was handed out
	// (failover.Record.Renew).
	renew(ctx context.Context, key, owner string, epoch uint64, ttl time.Duration) (failover.Answer, error)
	// release gives the model's lease up if owner holds it at epoch.
	release(ctx context.Context, key, owner string, epoch uint64) error
	close() error
}

// errLeaseLost is what a store write answers once the writer's lease is
// gone.
var errLeaseLost = errors.New("the router no longer holds the model's lease")

// encodeRef and decodeRef write a slot as "executor|generation|instance|slot"
// (the executor id goes last-but-three so '|' inside it is harmless: split
// from the right).
func encodeRef(r seqbatch.SlotRef) string {
	return fmt.Sprintf("%s|%d|%d|%d", r.Instance.Executor, r.Instance.Generation, r.Instance.Index, r.Slot)
}

func decodeRef(s string) (seqbatch.SlotRef, bool) {
	parts := strings.Split(s, "|")
	if len(parts) < 4 {
		return seqbatch.SlotRef{}, false
	}
	n := len(parts)
	gen, err1 := strconv.ParseUint(parts[n-3], 10, 64)
	idx, err2 := strconv.Atoi(parts[n-2])
	slot, err3 := strconv.Atoi(parts[n-1])
	if err1 != nil || err2 != nil || err3 != nil {
		return seqbatch.SlotRef{}, false
	}
	return seqbatch.SlotRef{Instance: seqbatch.InstanceKey{Executor: strings.Join(parts[:n-3], "|"), Generation: gen, Index: idx}, Slot: slot}, true
}

// memStore is the standalone store: one process, one router, always active.
type memStore struct {
	mu      sync.Mutex
	models  map[string]*memModel
	records map[string]*failover.Record
}

// memModel is one model version's state; it is shared by the writers of
// every epoch, each through a memWriter.
type memModel struct {
	s       *memStore
	key     string
	bound   map[seqbatch.ID]seqbatch.SlotRef
	backlog []seqbatch.ID
}

// memWriter writes a model's state for the holder of lease epoch.
type memWriter struct {
	*memModel
	owner string
	epoch uint64
}

func newMemStore() *memStore {
	return &memStore{models: map[string]*memModel{}, records: map[string]*failover.Record{}}
}

// get returns key's state; s.mu is held.
func (s *memStore) get(key string) *memModel {
	m := s.models[key]
	if m == nil {
		m = &memModel{s: s, key: key, bound: map[seqbatch.ID]seqbatch.SlotRef{}}
		s.models[key] = m
	}
	return m
}

// record returns key's lease record; s.mu is held.
func (s *memStore) record(key string) *failover.Record {
	r := s.records[key]
	if r == nil {
		r = &failover.Record{}
		s.records[key] = r
	}
	return r
}

func (s *memStore) model(key, owner string, epoch uint64) seqbatch.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &memWriter{memModel: s.get(key), owner: owner, epoch: epoch}
}

func (s *memStore) load(_ context.Context, key string) (map[seqbatch.ID]seqbatch.SlotRef, []seqbatch.ID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.get(key)
	b := make(map[seqbatch.ID]seqbatch.SlotRef, len(m.bound))
	for k, v := range m.bound {
		b[k] = v
	}
	return b, append([]seqbatch.ID(nil), m.backlog...), nil
}

func (s *memStore) acquire(_ context.Context, key, owner string, floor uint64, ttl time.Duration) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.record(key).Acquire(time.Now(), owner, floor, ttl), nil
}

func (s *memStore) renew(_ context.Context, key, owner string, epoch uint64, ttl time.Duration) (failover.Answer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.record(key).Renew(time.Now(), owner, epoch, ttl), nil
}

func (s *memStore) release(_ context.Context, key, owner string, epoch uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(key).Release(owner, epoch)
	return nil
}

// fenced checks, with s.mu held, that w's lease allows it to write.
func (w *memWriter) fenced() error {
	if !w.s.record(w.key).MayWrite(time.Now(), w.owner, w.epoch) {
		return errLeaseLost
	}
	return nil
}

func (s *memStore) close() error { return nil }

func (m *memModel) dropBacklog(id seqbatch.ID) {
	for i, b := range m.backlog {
		if b == id {
			m.backlog = append(m.backlog[:i], m.backlog[i+1:]...)
			return
		}
	}
}

func (m *memWriter) Bind(id seqbatch.ID, at seqbatch.SlotRef) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if err := m.fenced(); err != nil {
		return err
	}
	for other, ref := range m.bound {
		if ref == at && other != id {
			delete(m.bound, other) // stale (seqbatch.Store)
		}
	}
	m.bound[id] = at
	m.dropBacklog(id)
	return nil
}

func (m *memWriter) Backlog(id seqbatch.ID) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if err := m.fenced(); err != nil {
		return err
	}
	m.dropBacklog(id)
	m.backlog = append(m.backlog, id)
	return nil
}

func (m *memWriter) Unbind(id seqbatch.ID) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if err := m.fenced(); err != nil {
		return err
	}
	delete(m.bound, id)
	m.dropBacklog(id)
	return nil
}

// redisStore keeps the state in Redis, per model version (one hash slot):
//
//	nereid:seq:{<model key>}:lease   string "<router id>|<epoch>", with a TTL
//	nereid:seq:{<model key>}:epoch   counter: the last epoch handed out
//	nereid:seq:{<model key>}:bind    hash: typed id (seqbatch.ID.Key) -> slot
//	nereid:seq:{<model key>}:backlog sorted set: typed id, scored by arrival
//
// Every write is one Lua script that first checks the writer still holds
// the lease at its epoch (a fencing token), then changes binding and
// backlog together, so a reader never sees a sequence both bound and
// waiting, and a router whose lease lapsed cannot undo its successor's work.
type redisStore struct {
	rdb *redis.Client
	// opTimeout bounds one store operation made on behalf of a request.
	opTimeout time.Duration
}

func leaseKey(model string) string   { return "nereid:seq:{" + model + "}:lease" }
func epochKey(model string) string   { return "nereid:seq:{" + model + "}:epoch" }
func bindKey(model string) string    { return "nereid:seq:{" + model + "}:bind" }
func backlogKey(model string) string { return "nereid:seq:{" + model + "}:backlog" }

type redisModel struct {
	s     *redisStore
	key   string
	lease string
}

func (s *redisStore) model(key, owner string, epoch uint64) seqbatch.Store {
	return &redisModel{s: s, key: key, lease: redislease.Value(owner, epoch)}
}

func (s *redisStore) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opTimeout)
}

// The write scripts: KEYS lease, bind, backlog; ARGV[1] the writer's lease
// value, ARGV[2] the typed id. bindScript's ARGV[3] is the slot: another
// sequence bound there is stale and goes (seqbatch.Store). Finding it
// reads the model version's bindings (HGETALL, which the router's Redis
// user may run; HGET it may not): one per sequence slot at most, plus
// stale ones. Its first write is HSET, so that a Redis refusing writes
// (maxmemory) refuses the script before it changed anything.
var (
	bindScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('NOLEASE') end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[2])
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if all[i+1] == ARGV[3] and all[i] ~= ARGV[2] then redis.call('HDEL', KEYS[2], all[i]) end
end
return 1`)
	backlogScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('NOLEASE') end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return 1`)
	unbindScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('NOLEASE') end
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
return 1`)
)

func (m *redisModel) write(script *redis.Script, id seqbatch.ID, arg string) error {
	ctx, cancel := m.s.ctx()
	defer cancel()
	err := script.Run(ctx, m.s.rdb, []string{leaseKey(m.key), bindKey(m.key), backlogKey(m.key)}, m.lease, id.Key(), arg).Err()
	switch {
	case err != nil && strings.Contains(err.Error(), "NOLEASE"):
		return errLeaseLost
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		// The write's own bound, not a caller's: Redis did not answer
		// (a restart whose address does not refuse connections yet).
		return fmt.Errorf("%w within %v", errStoreUnanswered, m.s.opTimeout)
	}
	return err
}

// errStoreUnanswered is a store write that Redis did not answer within
// the store's bound on one operation: like a refused connection, waiting
// may fix it (storeAway).
var errStoreUnanswered = errors.New("redis did not answer")

// storeAway reports whether a store write failed for a reason waiting
// fixes: Redis restarting, loading its data set or not answering.
func storeAway(err error) bool {
	return redisconn.Transient(err) || errors.Is(err, errStoreUnanswered)
}

func (m *redisModel) Bind(id seqbatch.ID, at seqbatch.SlotRef) error {
	return m.write(bindScript, id, encodeRef(at))
}

func (m *redisModel) Backlog(id seqbatch.ID) error {
	return m.write(backlogScript, id, strconv.FormatInt(time.Now().UnixNano(), 10))
}

func (m *redisModel) Unbind(id seqbatch.ID) error { return m.write(unbindScript, id, "") }

func (s *redisStore) load(ctx context.Context, key string) (map[seqbatch.ID]seqbatch.SlotRef, []seqbatch.ID, error) {
	var hall *redis.MapStringStringCmd
	var zr *redis.StringSliceCmd
	// Read within ctx through a Redis that restarts or loads its data
	// set: a takeover that read nothing would start without the bindings.
	err := redisconn.Retry(ctx, &backoff.Backoff{Min: 25 * time.Millisecond, Max: 250 * time.Millisecond}, func(ctx context.Context) error {
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			hall = p.HGetAll(ctx, bindKey(key))
			zr = p.ZRange(ctx, backlogKey(key), 0, -1)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	bound := map[seqbatch.ID]seqbatch.SlotRef{}
	for k, v := range hall.Val() {
		id, ok1 := seqbatch.ParseKey(k)
		ref, ok2 := decodeRef(v)
		if ok1 && ok2 {
			bound[id] = ref
		}
	}
	var backlog []seqbatch.ID
	for _, k := range zr.Val() {
		if id, ok := seqbatch.ParseKey(k); ok {
			backlog = append(backlog, id)
		}
	}
	return bound, backlog, nil
}

// modelLease is a model's lease in Redis.
func modelLease(model string) redislease.Lease {
	return redislease.Lease{Key: leaseKey(model), EpochKey: epochKey(model)}
}

func (s *redisStore) acquire(ctx context.Context, key, owner string, floor uint64, ttl time.Duration) (uint64, error) {
	return modelLease(key).Acquire(ctx, s.rdb, owner, floor, ttl)
}

func (s *redisStore) renew(ctx context.Context, key, owner string, epoch uint64, ttl time.Duration) (failover.Answer, error) {
	return modelLease(key).Renew(ctx, s.rdb, owner, epoch, ttl)
}

func (s *redisStore) release(ctx context.Context, key, owner string, epoch uint64) error {
	return modelLease(key).Release(ctx, s.rdb, owner, epoch)
}

func (s *redisStore) close() error { return s.rdb.Close() }
