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

	"github.com/nereid-io/nereid/pkg/seqbatch"
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
	// acquire takes the model's lease for owner (epoch 0), with a new epoch
	// greater than any before, or renews the lease owner holds at epoch.
	// It returns the epoch held, 0 when another router holds the lease.
	acquire(ctx context.Context, key, owner string, epoch uint64, ttl time.Duration) (uint64, error)
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
	mu     sync.Mutex
	models map[string]*memModel
	leases map[string]memLease
	epochs map[string]uint64
}

type memLease struct {
	owner   string
	epoch   uint64
	expires time.Time
}

type memModel struct {
	s       *memStore
	bound   map[seqbatch.ID]seqbatch.SlotRef
	backlog []seqbatch.ID
}

func newMemStore() *memStore {
	return &memStore{models: map[string]*memModel{}, leases: map[string]memLease{}, epochs: map[string]uint64{}}
}

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

func (s *memStore) model(key, _ string, _ uint64) seqbatch.Store { return s.get(key) }

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

// acquire mirrors acquireScript, for one process.
func (s *memStore) acquire(_ context.Context, key, owner string, epoch uint64, ttl time.Duration) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	l, held := s.leases[key]
	held = held && now.Before(l.expires)
	switch {
	case held && l.owner == owner && epoch != 0 && l.epoch == epoch:
	case held, epoch != 0:
		return 0, nil
	default:
		s.epochs[key]++
		l = memLease{owner: owner, epoch: s.epochs[key]}
	}
	l.expires = now.Add(ttl)
	s.leases[key] = l
	return l.epoch, nil
}

func (s *memStore) release(_ context.Context, key, owner string, epoch uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.leases[key]; l.owner == owner && l.epoch == epoch {
		delete(s.leases, key)
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

func leaseValue(owner string, epoch uint64) string {
	return owner + "|" + strconv.FormatUint(epoch, 10)
}

type redisModel struct {
	s     *redisStore
	key   string
	lease string
}

func (s *redisStore) model(key, owner string, epoch uint64) seqbatch.Store {
	return &redisModel{s: s, key: key, lease: leaseValue(owner, epoch)}
}

func (s *redisStore) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opTimeout)
}

// The write scripts: KEYS lease, bind, backlog; ARGV[1] the writer's lease
// value, ARGV[2] the typed id.
var (
	bindScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('NOLEASE') end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[2])
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
	if err != nil && strings.Contains(err.Error(), "NOLEASE") {
		return errLeaseLost
	}
	return err
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

// acquireScript takes a model's lease when it is free, with the next epoch,
// or renews it when the caller holds it at the epoch it names; atomically.
// KEYS lease, epoch; ARGV owner, epoch (0: take), ttl ms.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if ARGV[2] ~= '0' then
  if v == ARGV[1] .. '|' .. ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return tonumber(ARGV[2])
  end
  return 0
end
if v ~= false then return 0 end
local e = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. e, 'PX', ARGV[3])
return e`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

func (s *redisStore) acquire(ctx context.Context, key, owner string, epoch uint64, ttl time.Duration) (uint64, error) {
	n, err := acquireScript.Run(ctx, s.rdb, []string{leaseKey(key), epochKey(key)}, owner, strconv.FormatUint(epoch, 10), ttl.Milliseconds()).Int64()
	if err != nil {
		return 0, err
	}
	return uint64(n), nil
}

func (s *redisStore) release(ctx context.Context, key, owner string, epoch uint64) error {
	return releaseScript.Run(ctx, s.rdb, []string{leaseKey(key)}, leaseValue(owner, epoch)).Err()
}

func (s *redisStore) close() error { return s.rdb.Close() }
