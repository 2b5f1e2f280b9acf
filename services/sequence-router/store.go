package seqrouter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/seqbatch"
)

// store keeps what another router needs to take over: per model version,
// the bindings of sequences to executor instance slots and the backlog
// order; and the lease that makes one router the active one.
type store interface {
	// model returns the seqbatch.Store of one model version.
	model(key string) seqbatch.Store
	// load reads a model version's bindings and backlog (oldest first).
	load(ctx context.Context, key string) (map[seqbatch.ID]seqbatch.SlotRef, []seqbatch.ID, error)
	// acquire takes or renews the lease for owner, for ttl; false when
	// another router holds it.
	acquire(ctx context.Context, owner string, ttl time.Duration) (bool, error)
	// release gives the lease up if owner holds it.
	release(ctx context.Context, owner string) error
	close() error
}

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
	mu     sync.Mutex
	models map[string]*memModel
}

type memModel struct {
	s       *memStore
	bound   map[seqbatch.ID]seqbatch.SlotRef
	backlog []seqbatch.ID
}

func newMemStore() *memStore { return &memStore{models: map[string]*memModel{}} }

func (s *memStore) get(key string) *memModel {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[key]
	if m == nil {
		m = &memModel{s: s, bound: map[seqbatch.ID]seqbatch.SlotRef{}}
		s.models[key] = m
	}
	return m
}

func (s *memStore) model(key string) seqbatch.Store { return s.get(key) }

func (s *memStore) load(_ context.Context, key string) (map[seqbatch.ID]seqbatch.SlotRef, []seqbatch.ID, error) {
	m := s.get(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := make(map[seqbatch.ID]seqbatch.SlotRef, len(m.bound))
	for k, v := range m.bound {
		b[k] = v
	}
	return b, append([]seqbatch.ID(nil), m.backlog...), nil
}

func (s *memStore) acquire(context.Context, string, time.Duration) (bool, error) { return true, nil }
func (s *memStore) release(context.Context, string) error                        { return nil }
func (s *memStore) close() error                                                 { return nil }

func (m *memModel) dropBacklog(id seqbatch.ID) {
	for i, b := range m.backlog {
		if b == id {
			m.backlog = append(m.backlog[:i], m.backlog[i+1:]...)
			return
		}
	}
}

func (m *memModel) Bind(id seqbatch.ID, at seqbatch.SlotRef) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.bound[id] = at
	m.dropBacklog(id)
	return nil
}

func (m *memModel) Backlog(id seqbatch.ID) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.dropBacklog(id)
	m.backlog = append(m.backlog, id)
	return nil
}

func (m *memModel) Unbind(id seqbatch.ID) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	delete(m.bound, id)
	m.dropBacklog(id)
	return nil
}

// redisStore keeps the state in Redis:
//
//	nereid:seq:lease                 string: the active router's id, with a TTL
//	nereid:seq:{<model key>}:bind    hash: typed id (seqbatch.ID.Key) -> slot
//	nereid:seq:{<model key>}:backlog sorted set: typed id, scored by arrival
//
// Every change is one MULTI/EXEC (binding and backlog together), so a
// reader never sees a sequence both bound and waiting.
type redisStore struct {
	rdb *redis.Client
	// opTimeout bounds one store operation made on behalf of a request.
	opTimeout time.Duration
}

const leaseKey = "nereid:seq:lease"

func bindKey(model string) string    { return "nereid:seq:{" + model + "}:bind" }
func backlogKey(model string) string { return "nereid:seq:{" + model + "}:backlog" }

type redisModel struct {
	s   *redisStore
	key string
}

func (s *redisStore) model(key string) seqbatch.Store { return &redisModel{s: s, key: key} }

func (s *redisStore) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opTimeout)
}

func (m *redisModel) Bind(id seqbatch.ID, at seqbatch.SlotRef) error {
	ctx, cancel := m.s.ctx()
	defer cancel()
	_, err := m.s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, bindKey(m.key), id.Key(), encodeRef(at))
		p.ZRem(ctx, backlogKey(m.key), id.Key())
		return nil
	})
	return err
}

func (m *redisModel) Backlog(id seqbatch.ID) error {
	ctx, cancel := m.s.ctx()
	defer cancel()
	return m.s.rdb.ZAdd(ctx, backlogKey(m.key), redis.Z{Score: float64(time.Now().UnixNano()), Member: id.Key()}).Err()
}

func (m *redisModel) Unbind(id seqbatch.ID) error {
	ctx, cancel := m.s.ctx()
	defer cancel()
	_, err := m.s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, bindKey(m.key), id.Key())
		p.ZRem(ctx, backlogKey(m.key), id.Key())
		return nil
	})
	return err
}

func (s *redisStore) load(ctx context.Context, key string) (map[seqbatch.ID]seqbatch.SlotRef, []seqbatch.ID, error) {
	var hall *redis.MapStringStringCmd
	var zr *redis.StringSliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hall = p.HGetAll(ctx, bindKey(key))
		zr = p.ZRange(ctx, backlogKey(key), 0, -1)
		return nil
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

// acquireScript takes the lease when it is free and renews it when owner
// holds it, atomically.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

func (s *redisStore) acquire(ctx context.Context, owner string, ttl time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, s.rdb, []string{leaseKey}, owner, ttl.Milliseconds()).Int()
	return n == 1, err
}

func (s *redisStore) release(ctx context.Context, owner string) error {
	return releaseScript.Run(ctx, s.rdb, []string{leaseKey}, owner).Err()
}

func (s *redisStore) close() error { return s.rdb.Close() }
