package placer

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/services/sequence-router/internal/redislease"
)

// The controller's state in the sequence router's Redis:
//
//	nereid:placement:lease        string "<controller id>|<epoch>", with a TTL
//	nereid:placement:epoch        the last epoch handed out
//	nereid:placement:footprints   hash model -> bytes measured
//
// The lease follows failover.Record's rules with the same scripts as the
// router's per-model leases (internal/redislease); writes are
// fenced by it, so a controller whose lease lapsed cannot overwrite its
// successor's state.
const (
	leaseKey      = "nereid:placement:lease"
	epochKey      = "nereid:placement:epoch"
	footprintsKey = "nereid:placement:footprints"
)

// lease is the controller's lease.
var lease = redislease.Lease{Key: leaseKey, EpochKey: epochKey}

// footprintScript writes footprints (ARGV[2..]: model, bytes, ...) for the
// holder of the lease (ARGV[1]); 0 when the writer no longer holds it.
var footprintScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i+1])
end
return 1`)

type store struct{ rdb *redis.Client }

func (s *store) acquire(ctx context.Context, owner string, ttl time.Duration) (uint64, error) {
	return lease.Acquire(ctx, s.rdb, owner, 0, ttl)
}

func (s *store) renew(ctx context.Context, owner string, epoch uint64, ttl time.Duration) (failover.Answer, error) {
	return lease.Renew(ctx, s.rdb, owner, epoch, ttl)
}

func (s *store) release(ctx context.Context, owner string, epoch uint64) error {
	return lease.Release(ctx, s.rdb, owner, epoch)
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
	args := []any{redislease.Value(owner, epoch)}
	for k, v := range f {
		args = append(args, k, strconv.FormatUint(v, 10))
	}
	return footprintScript.Run(ctx, s.rdb, []string{leaseKey, footprintsKey}, args...).Err()
}
