// Package redislease keeps a failover.Record lease in Redis: the sequence
// router's lease of each model and the placement controller's lease are
// both one, with the same scripts.
package redislease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/failover"
)

// Lease names the two keys of one lease: Key holds "<owner>|<epoch>" with
// a TTL, EpochKey the last epoch handed out. The scripts use only the
// commands the router's Redis user may run (deploy/redis/users.acl.in).
type Lease struct {
	Key, EpochKey string
}

// Value is what Key holds for owner at epoch; a write fenced by the lease
// compares it.
func Value(owner string, epoch uint64) string {
	return owner + "|" + strconv.FormatUint(epoch, 10)
}

// acquireScript is failover.Record.Acquire: it takes the lease when nobody
// holds it, with the next epoch but at least the floor. KEYS lease, epoch;
// ARGV owner, floor, ttl ms.
var acquireScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) then return 0 end
local e = redis.call('INCR', KEYS[2])
local floor = tonumber(ARGV[2])
if e < floor then
  e = floor
  redis.call('SET', KEYS[2], e)
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. e, 'PX', ARGV[3])
return e`)

// renewScript is failover.Record.Renew: 1 renewed, 2 taken, 3 missing
// (lapsed, a newer epoch handed out since), 4 restored (taken back at the
// same epoch; the counter set again if the store lost it). KEYS lease,
// epoch; ARGV owner, epoch, ttl ms.
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

// renewAnswers maps renewScript's results.
var renewAnswers = map[int64]failover.Answer{1: failover.Renewed, 2: failover.Taken, 3: failover.Missing, 4: failover.Restored}

// Acquire takes the lease for owner when nobody holds it and returns its
// epoch, the next one but at least floor; 0 when someone holds it.
func (l Lease) Acquire(ctx context.Context, rdb redis.Scripter, owner string, floor uint64, ttl time.Duration) (uint64, error) {
	n, err := acquireScript.Run(ctx, rdb, []string{l.Key, l.EpochKey}, owner, strconv.FormatUint(floor, 10), ttl.Milliseconds()).Int64()
	if err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// Renew extends owner's lease at epoch, or takes it back when it lapsed
// and no newer epoch was handed out.
func (l Lease) Renew(ctx context.Context, rdb redis.Scripter, owner string, epoch uint64, ttl time.Duration) (failover.Answer, error) {
	n, err := renewScript.Run(ctx, rdb, []string{l.Key, l.EpochKey}, owner, strconv.FormatUint(epoch, 10), ttl.Milliseconds()).Int64()
	if err != nil {
		return failover.Unreachable, err
	}
	a, ok := renewAnswers[n]
	if !ok {
		return failover.Unreachable, fmt.Errorf("lease renewal of %s: unexpected answer %d", l.Key, n)
	}
	return a, nil
}

// Release gives the lease up when owner holds it at epoch.
func (l Lease) Release(ctx context.Context, rdb redis.Scripter, owner string, epoch uint64) error {
	return releaseScript.Run(ctx, rdb, []string{l.Key}, Value(owner, epoch)).Err()
}
