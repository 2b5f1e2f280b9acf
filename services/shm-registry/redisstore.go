package shmregistry

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// redisStore keeps regions in Redis, so that they outlive a registry and
// registries can share them. Every change is one Lua script, atomic across
// registries. Keys, all in one hash slot ({prefix}):
//
//	{p}:names        set of region names
//	{p}:awaiting     set of names unregistered while held
//	{p}:r:<name>     hash: pb (the ShmRegion), kind
//	{p}:h:<name>     sorted set: holder -> expiry (Unix ms)
type redisStore struct {
	rdb *redis.Client
	p   string
}

// DefaultRedisPrefix is the key prefix of the registry's Redis keys.
const DefaultRedisPrefix = "nereid:shm"

func newRedisStore(rdb *redis.Client, prefix string) *redisStore {
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	return &redisStore{rdb: rdb, p: "{" + prefix + "}"}
}

func (s *redisStore) names() string          { return s.p + ":names" }
func (s *redisStore) awaiting() string       { return s.p + ":awaiting" }
func (s *redisStore) region(n string) string { return s.p + ":r:" + n }
func (s *redisStore) holds(n string) string  { return s.p + ":h:" + n }
func ms(t time.Time) string                  { return strconv.FormatInt(t.UnixMilli(), 10) }
func storeErr(err error) error {
	return tritonerr.Unavailablef("shared memory registry: store unavailable: %v", err)
}

var registerScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'pb', ARGV[2], 'kind', ARGV[3])
redis.call('SADD', KEYS[1], ARGV[1])
return 1`)

func (s *redisStore) Register(ctx context.Context, r *busv1.ShmRegion) error {
	pb, err := proto.Marshal(r)
	if err != nil {
		return tritonerr.Internalf("encoding region: %v", err)
	}
	n, err := registerScript.Run(ctx, s.rdb, []string{s.names(), s.region(r.GetName())},
		r.GetName(), pb, int(r.GetKind())).Int()
	if err != nil {
		return storeErr(err)
	}
	if n == 0 {
		return alreadyExists(r.GetName())
	}
	return nil
}

func decode(v any) (*busv1.ShmRegion, error) {
	s, ok := v.(string)
	if !ok {
		return nil, nil
	}
	r := &busv1.ShmRegion{}
	if err := proto.Unmarshal([]byte(s), r); err != nil {
		return nil, tritonerr.Internalf("decoding region: %v", err)
	}
	return r, nil
}

func (s *redisStore) Get(ctx context.Context, name string) (*busv1.ShmRegion, error) {
	pipe := s.rdb.Pipeline()
	pb := pipe.HGet(ctx, s.region(name), "pb")
	aw := pipe.SIsMember(ctx, s.awaiting(), name)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, storeErr(err)
	}
	if pb.Err() != nil {
		return nil, nil
	}
	r, err := decode(pb.Val())
	if r != nil {
		r.AwaitingUnregister = aw.Val()
	}
	return r, err
}

func (s *redisStore) List(ctx context.Context) ([]*busv1.ShmRegion, error) {
	names, err := s.rdb.SMembers(ctx, s.names()).Result()
	if err != nil {
		return nil, storeErr(err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	awaiting, err := s.rdb.SMembers(ctx, s.awaiting()).Result()
	if err != nil {
		return nil, storeErr(err)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.HGet(ctx, s.region(n), "pb")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, storeErr(err)
	}
	out := make([]*busv1.ShmRegion, 0, len(names))
	for _, c := range cmds {
		if c.Err() != nil {
			continue // removed between the two reads
		}
		r, err := decode(c.Val())
		if err != nil {
			return nil, err
		}
		for _, a := range awaiting {
			if a == r.GetName() {
				r.AwaitingUnregister = true
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// finishLua removes the region of KEYS[3]/KEYS[4] (name ARGV[1]) and returns
// its pb; the caller has checked nobody holds it.
const finishLua = `
local function finish(names, awaiting, rkey, hkey, name)
  local pb = redis.call('HGET', rkey, 'pb')
  redis.call('DEL', rkey, hkey)
  redis.call('SREM', names, name)
  redis.call('SREM', awaiting, name)
  return pb
end
`

var unregisterScript = redis.NewScript(finishLua + `
local kind = redis.call('HGET', KEYS[3], 'kind')
if (not kind) or kind ~= ARGV[2] then return {0} end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[4]) > 0 then
  redis.call('SADD', KEYS[2], ARGV[1])
  return {2}
end
return {1, finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])}`)

func (s *redisStore) Unregister(ctx context.Context, name string, kind busv1.ShmKind, now time.Time) (*busv1.ShmRegion, bool, error) {
	res, err := unregisterScript.Run(ctx, s.rdb,
		[]string{s.names(), s.awaiting(), s.region(name), s.holds(name)},
		name, int(kind), ms(now)).Slice()
	if err != nil {
		return nil, false, storeErr(err)
	}
	switch code, _ := res[0].(int64); code {
	case 2:
		return nil, true, nil
	case 1:
		r, err := decode(res[1])
		return r, false, err
	}
	return nil, false, nil
}

var acquireScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS, 2 do
  local pb = redis.call('HGET', KEYS[i], 'pb')
  if pb then
    redis.call('ZADD', KEYS[i+1], ARGV[2], ARGV[1])
    out[#out+1] = pb
  else
    out[#out+1] = false
  end
end
return out`)

func (s *redisStore) Acquire(ctx context.Context, holder string, names []string, expires time.Time) ([]*busv1.ShmRegion, []string, error) {
	keys := make([]string, 0, 2*len(names))
	for _, n := range names {
		keys = append(keys, s.region(n), s.holds(n))
	}
	res, err := acquireScript.Run(ctx, s.rdb, keys, holder, expires.UnixMilli()).Slice()
	if err != nil {
		return nil, nil, storeErr(err)
	}
	var found []*busv1.ShmRegion
	var missing []string
	for i, v := range res {
		r, err := decode(v)
		if err != nil {
			return nil, nil, err
		}
		if r == nil {
			missing = append(missing, names[i])
			continue
		}
		found = append(found, r)
	}
	return found, missing, nil
}

var releaseScript = redis.NewScript(finishLua + `
local out = {}
for i = 3, #KEYS, 2 do
  local name = ARGV[2 + (i - 1) / 2]
  redis.call('ZREM', KEYS[i+1], ARGV[1])
  if redis.call('SISMEMBER', KEYS[2], name) == 1 then
    redis.call('ZREMRANGEBYSCORE', KEYS[i+1], '-inf', ARGV[2])
    if redis.call('ZCARD', KEYS[i+1]) == 0 then
      local pb = finish(KEYS[1], KEYS[2], KEYS[i], KEYS[i+1], name)
      if pb then out[#out+1] = pb end
    end
  end
end
return out`)

func (s *redisStore) Release(ctx context.Context, holder string, names []string, now time.Time) ([]*busv1.ShmRegion, error) {
	keys := []string{s.names(), s.awaiting()}
	args := []any{holder, ms(now)}
	for _, n := range names {
		keys = append(keys, s.region(n), s.holds(n))
		args = append(args, n)
	}
	res, err := releaseScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, storeErr(err)
	}
	return decodeAll(res)
}

func decodeAll(res []any) ([]*busv1.ShmRegion, error) {
	var out []*busv1.ShmRegion
	for _, v := range res {
		r, err := decode(v)
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

var sweepScript = redis.NewScript(finishLua + `
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 0 then return false end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[4]) > 0 then return false end
return finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])`)

func (s *redisStore) Sweep(ctx context.Context, now time.Time) ([]*busv1.ShmRegion, error) {
	names, err := s.rdb.SMembers(ctx, s.awaiting()).Result()
	if err != nil {
		return nil, storeErr(err)
	}
	var out []*busv1.ShmRegion
	for _, n := range names {
		v, err := sweepScript.Run(ctx, s.rdb, []string{s.names(), s.awaiting(), s.region(n), s.holds(n)}, n, ms(now)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return out, storeErr(err)
		}
		r, err := decode(v)
		if err != nil {
			return out, err
		}
		if r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *redisStore) Close() error { return s.rdb.Close() }
