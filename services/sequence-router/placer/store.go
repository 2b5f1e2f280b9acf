package placer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/failover"
)

// The controller's state in the sequence router's Redis:
//
//	nereid:placement:lease        string "<controller id>|<epoch>", with a TTL
//	nereid:placement:epoch        the last epoch handed out
//	nereid:placement:footprints   hash model -> bytes measured
//
// The lease follows failover.Record's rules with the same scripts as the
// router's per-model leases (services/sequence-router/store.go); writes are
// fenced by it, so a controller whose lease lapsed cannot overwrite its
// successor's state.
const (
	leaseKey      = "nereid:placement:lease"
	epochKey      = "nereid:placement:epoch"
	footprintsKey = "nereid:placement:footprints"
)

var acquireScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) then return 0 end
local e = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. e, 'PX', ARGV[2])
return e`)

var renewScript = redis.NewScript(`
local mine = ARGV[1] .. '|' .. ARGV[2]
local v = redis.call('GET', KEYS[1])
if v == mine then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if v then return 2 end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c > tonumber(ARGV[2]) then return 3 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], mine, 'PX', ARGV[3])
return 4`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// footprintScript writes footprints (ARGV[2..]: model, bytes, ...) for the
// holder of the lease (ARGV[1]); 0 when the writer no longer holds it.
var footprintScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i+1])
end
return 1`)

var renewAnswers = map[int64]failover.Answer{1: failover.Renewed, 2: failover.Taken, 3: failover.Missing, 4: failover.Restored}

type store struct{ rdb *redis.Client }

func leaseValue(owner string, epoch uint64) string {
	return owner + "|" + strconv.FormatUint(epoch, 10)
}

func (s *store) acquire(ctx context.Context, owner string, ttl time.Duration) (uint64, error) {
	n, err := acquireScript.Run(ctx, s.rdb, []string{leaseKey, epochKey}, owner, ttl.Milliseconds()).Int64()
	return uint64(n), err
}

func (s *store) renew(ctx context.Context, owner string, epoch uint64, ttl time.Duration) (failover.Answer, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{leaseKey, epochKey}, owner, strconv.FormatUint(epoch, 10), ttl.Milliseconds()).Int64()
	if err != nil {
		return failover.Unreachable, err
	}
	a, ok := renewAnswers[n]
	if !ok {
		return failover.Unreachable, fmt.Errorf("placement lease renewal: unexpected answer %d", n)
	}
	return a, nil
}

func (s *store) release(ctx context.Context, owner string, epoch uint64) error {
	return releaseScript.Run(ctx, s.rdb, []string{leaseKey}, leaseValue(owner, epoch)).Err()
}

func (s *store) footprints(ctx context.Context) (map[string]uint64, error) {
	m, err := s.rdb.HGetAll(ctx, footprintsKey).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

func (s *store) saveFootprints(ctx context.Context, owner string, epoch uint64, f map[string]uint64) error {
	args := []any{leaseValue(owner, epoch)}
	for k, v := range f {
		args = append(args, k, strconv.FormatUint(v, 10))
	}
	return footprintScript.Run(ctx, s.rdb, []string{leaseKey, footprintsKey}, args...).Err()
}
