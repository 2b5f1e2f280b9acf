package executor

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/services/executor/internal/seqstate"
)

// stateStore keeps the durable states of sequences (models with
// state_durability "redis"), one seqstate.Record per sequence, under the
// rules of seqstate.Save and seqstate.MayDrop, applied atomically. The
// Redis store is the real one; the memory store serves an executor started
// without Redis (the standalone server), where the state cannot outlive the
// process anyway.
type stateStore interface {
	// load returns a sequence's record, nil when there is none.
	load(ctx context.Context, key string) (*seqstate.Record, error)
	// save applies writes (one per sequence) in one round trip and
	// returns their verdicts; each record lives ttl from its last write.
	save(ctx context.Context, ws []keyedWrite, ttl time.Duration) ([]seqstate.Verdict, error)
	// drop deletes the records seqstate.MayDrop allows, in one round trip.
	drop(ctx context.Context, ds []keyedDrop) error
	close() error
}

type keyedWrite struct {
	key string
	w   seqstate.Write
}

type keyedDrop struct {
	key          string
	fence        uint64
	token, after string
}

// stateKey is where a sequence's durable state lives:
//
//	nereid:state:{<model key>}:<typed sequence id>
//
// a hash with the fields fence (20 digits, so that Lua compares it as a
// string), token, state, prev and hasprev. The SCAN pattern
// nereid:state:* finds every durable state of the constellation.
func stateKey(modelKey, idKey string) string {
	return "nereid:state:{" + modelKey + "}:" + idKey
}

// StateKeyPattern matches every key of the durable states (for SCAN).
const StateKeyPattern = "nereid:state:*"

// fenceDigits is the width of a stored fence: every uint64 fits.
const fenceDigits = 20

// memStates is the memory store.
type memStates struct {
	mu      sync.Mutex
	records map[string]*seqstate.Record
	expires map[string]time.Time
}

func newMemStates() *memStates {
	return &memStates{records: map[string]*seqstate.Record{}, expires: map[string]time.Time{}}
}

// get returns key's live record; m.mu is held.
func (m *memStates) get(key string, now time.Time) *seqstate.Record {
	if exp, ok := m.expires[key]; ok && !now.Before(exp) {
		delete(m.records, key)
		delete(m.expires, key)
	}
	return m.records[key]
}

func (m *memStates) load(_ context.Context, key string) (*seqstate.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.get(key, time.Now())
	if r == nil {
		return nil, nil
	}
	c := *r
	return &c, nil
}

func (m *memStates) save(_ context.Context, ws []keyedWrite, ttl time.Duration) ([]seqstate.Verdict, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	out := make([]seqstate.Verdict, len(ws))
	for i, kw := range ws {
		v, r := seqstate.Save(m.get(kw.key, now), kw.w)
		out[i] = v
		if v == seqstate.Saved {
			m.records[kw.key], m.expires[kw.key] = r, now.Add(ttl)
		}
	}
	// Expired records of sequences nobody writes any more go too.
	for k, exp := range m.expires {
		if !now.Before(exp) {
			delete(m.records, k)
			delete(m.expires, k)
		}
	}
	return out, nil
}

func (m *memStates) drop(_ context.Context, ds []keyedDrop) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for _, d := range ds {
		if seqstate.MayDrop(m.get(d.key, now), d.fence, d.token, d.after) {
			delete(m.records, d.key)
			delete(m.expires, d.key)
		}
	}
	return nil
}

func (m *memStates) close() error { return nil }

// redisStates is the Redis store: every write and every drop is one Lua
// script (seqstate.Save's and seqstate.MayDrop's rules), a batch's scripts
// sent in one pipeline. The scripts use only the commands the executor's
// Redis user may run (deploy/redis/users.acl.in).
//
// Writes and drops, on the path of a sequence's answers, go over
// connections of the store's own (writeConn: RESP without go-redis's
// per-command machinery), kept between batches, each used by one batch at
// a time; loads, rare, use the client.
type redisStates struct {
	rdb   *redis.Client
	conns chan *writeConn
}

// idleWriteConns bounds the connections kept between writes: a batch holds
// one during its write, so this many batches (instances of durable models
// writing at once) write without dialing.
const idleWriteConns = 8

func newRedisStates(rdb *redis.Client) *redisStates {
	return &redisStates{rdb: rdb, conns: make(chan *writeConn, idleWriteConns)}
}

// release keeps c for the next write unless err says the connection
// failed (after an error reply from Redis, NOSCRIPT or a script's, the
// replies still line up). A failed one is closed with every kept one:
// what broke it (Redis restarted, the network) most likely broke them
// too, and the next try should dial anew rather than meet them one by
// one.
func (s *redisStates) release(c *writeConn, err error) {
	if isConnError(err) {
		_ = c.close()
		s.closeIdle()
		return
	}
	select {
	case s.conns <- c:
	default:
		_ = c.close()
	}
}

// luaScript is a script's text and its SHA-1, for EVALSHA.
type luaScript struct{ src, sha string }

func newScript(src string) luaScript {
	sum := sha1.Sum([]byte(src))
	return luaScript{src: src, sha: hex.EncodeToString(sum[:])}
}

// saveScript is seqstate.Save. KEYS the record; ARGV fence, token, after,
// start ("1" or "0"), state, ttl ms. Answers 0 saved, 1 stale, 2 gone.
var saveScript = newScript(`
local r = redis.call('HMGET', KEYS[1], 'fence', 'token')
local f, tok = r[1], r[2]
if f and f > ARGV[1] then return 1 end
if tok and tok == ARGV[2] then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'state', ARGV[5])
elseif ARGV[4] == '1' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'token', ARGV[2], 'state', ARGV[5])
elseif not tok then
  return 2
elseif tok == ARGV[3] then
  local cur = redis.call('HGET', KEYS[1], 'state')
  redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'token', ARGV[2], 'state', ARGV[5], 'prev', cur, 'hasprev', '1')
else
  return 1
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 0`)

// dropScript is seqstate.MayDrop. KEYS the record; ARGV fence, token,
// after.
var dropScript = newScript(`
local r = redis.call('HMGET', KEYS[1], 'fence', 'token')
if not r[1] or r[1] > ARGV[1] then return 0 end
if r[2] == ARGV[2] or r[2] == ARGV[3] then return redis.call('DEL', KEYS[1]) end
return 0`)

var saveVerdicts = map[int64]seqstate.Verdict{0: seqstate.Saved, 1: seqstate.Stale, 2: seqstate.Gone}

func (s *redisStates) load(ctx context.Context, key string) (*seqstate.Record, error) {
	v, err := s.rdb.HMGet(ctx, key, "fence", "token", "state", "prev", "hasprev").Result()
	if err != nil {
		return nil, err
	}
	str := func(i int) (string, bool) {
		x, ok := v[i].(string)
		return x, ok
	}
	fence, ok := str(0)
	if !ok {
		return nil, nil
	}
	r := &seqstate.Record{}
	if r.Fence, err = strconv.ParseUint(fence, 10, 64); err != nil {
		return nil, fmt.Errorf("durable state %s: bad fence %q", key, fence)
	}
	r.Token, _ = str(1)
	st, _ := str(2)
	r.State = []byte(st)
	if p, ok := str(3); ok {
		r.Prev = []byte(p)
	}
	_, r.HasPrev = str(4)
	return r, nil
}

// scripts runs n scripts in one round trip (EVALSHA, with the key and
// nargs arguments add writes for the i-th), and all again with their text
// (EVAL) if Redis did not know the script (NOSCRIPT: a restarted server),
// and puts their integer answers in out. Under ctx's deadline.
//
// A kept connection can have been closed by Redis while it waited (a
// restart, an idle timeout): then the scripts go again at once over a new
// one. Running them twice is harmless: a write Redis already applied
// finds its own token in the record and leaves it as it is, a drop finds
// nothing to delete, and a newer batch's write in between makes either
// stale as it would anyway.
func (s *redisStates) scripts(ctx context.Context, script luaScript, nargs, n int, add func(c *writeConn, i int), out []int64) error {
	var c *writeConn
	select {
	case c = <-s.conns:
		err := exchange(ctx, c, script, nargs, n, add, out)
		if !isConnError(err) {
			s.release(c, err)
			return err
		}
		s.release(c, err)
	default:
	}
	c, err := dialWrite(ctx, s.rdb.Options())
	if err != nil {
		return err
	}
	err = exchange(ctx, c, script, nargs, n, add, out)
	s.release(c, err)
	return err
}

// exchange is one try of scripts over c.
func exchange(ctx context.Context, c *writeConn, script luaScript, nargs, n int, add func(c *writeConn, i int), out []int64) (err error) {
	dl, _ := ctx.Deadline() // none: zero, no deadline
	if err := c.nc.SetDeadline(dl); err != nil {
		return err
	}
	for _, eval := range [2]bool{false, true} {
		for i := range n {
			c.array(4 + nargs)
			if eval {
				c.str("EVAL")
				c.str(script.src)
			} else {
				c.str("EVALSHA")
				c.str(script.sha)
			}
			c.str("1")
			add(c, i)
		}
		if err = c.flush(); err != nil {
			return err
		}
		noscript := false
		for i := range n {
			v, rerr := c.reply()
			switch {
			case isConnError(rerr):
				return rerr
			case rerr != nil && strings.HasPrefix(rerr.Error(), "NOSCRIPT"):
				noscript = true
			case rerr != nil && err == nil:
				err = rerr
			}
			out[i] = v
		}
		if !noscript || err != nil {
			return err
		}
	}
	return err
}

func (s *redisStates) save(ctx context.Context, ws []keyedWrite, ttl time.Duration) ([]seqstate.Verdict, error) {
	answers := make([]int64, len(ws))
	ttlMs := ttl.Milliseconds()
	err := s.scripts(ctx, saveScript, 6, len(ws), func(c *writeConn, i int) {
		w := &ws[i].w
		c.str(ws[i].key)
		c.fixed(w.Fence, fenceDigits)
		c.str(w.Token)
		c.str(w.After)
		if w.Start {
			c.str("1")
		} else {
			c.str("0")
		}
		c.bytes(w.State)
		c.int(ttlMs)
	}, answers)
	if err != nil {
		return nil, err
	}
	out := make([]seqstate.Verdict, len(ws))
	for i, n := range answers {
		v, ok := saveVerdicts[n]
		if !ok {
			return nil, fmt.Errorf("durable state %s: unexpected answer %d", ws[i].key, n)
		}
		out[i] = v
	}
	return out, nil
}

func (s *redisStates) drop(ctx context.Context, ds []keyedDrop) error {
	answers := make([]int64, len(ds))
	return s.scripts(ctx, dropScript, 3, len(ds), func(c *writeConn, i int) {
		c.str(ds[i].key)
		c.fixed(ds[i].fence, fenceDigits)
		c.str(ds[i].token)
		c.str(ds[i].after)
	}, answers)
}

// closeIdle closes the kept connections.
func (s *redisStates) closeIdle() {
	for {
		select {
		case c := <-s.conns:
			_ = c.close()
		default:
			return
		}
	}
}

func (s *redisStates) close() error {
	s.closeIdle()
	return s.rdb.Close()
}
