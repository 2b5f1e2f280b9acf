package placer

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"

	"github.com/nereid-io/nereid/pkg/failover"
	"github.com/nereid-io/nereid/services/sequence-router/internal/redislease"
)

// The controller's state in the sequence router's Redis:
//
//	nereid:placement:lease        string "<controller id>|<epoch>", with a TTL
//	nereid:placement:epoch        the last epoch handed out
//	nereid:placement:footprints   hash model -> bytes measured
//	nereid:placement:gpu_footprints hash model -> GPU bytes measured
//	nereid:placement:pins         hash model -> JSON array of executor ids
//	nereid:placement:loaded       hash model -> how it was loaded, for the
//	                              models loaded in the cluster in explicit
//	                              model control mode: "1" by a load of its
//	                              own, "d" only as an ensemble's composing
//	                              model, else the busv1.ModelControlRequest
//	                              (protobuf) whose configuration and files
//	                              it was loaded with
//	nereid:placement:started      hash executor id -> the generation whose
//	                              startup models (--load-model) were loaded
//
// The lease follows failover.Record's rules with the same scripts as the
// router's per-model leases (internal/redislease); writes are
// fenced by it, so a controller whose lease lapsed cannot overwrite its
// successor's state.
const (
	leaseKey      = "nereid:placement:lease"
	epochKey      = "nereid:placement:epoch"
	footprintsKey = "nereid:placement:footprints"
	pinsKey       = "nereid:placement:pins"
	loadedKey     = "nereid:placement:loaded"
	startedKey    = "nereid:placement:started"
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

// pinScript sets (ARGV[3], a JSON array) or removes (ARGV[3] empty) the
// pin of model ARGV[2] for the holder of the lease (ARGV[1]); 0 when the
// writer no longer holds it.
var pinScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[2], ARGV[2])
else
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
end
return 1`)

// loadedScript changes the loaded models for the holder of the lease
// (ARGV[1]): ARGV[2] = n, then n pairs of a model added and how; then m,
// then m models removed; then an executor id ("" for none) and the
// generation whose startup models this adds. 0 when the writer no longer
// holds the lease.
var loadedScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local i = 2
local n = tonumber(ARGV[i])
for j = 1, n do redis.call('HSET', KEYS[2], ARGV[i+2*j-1], ARGV[i+2*j]) end
i = i + 2*n + 1
n = tonumber(ARGV[i])
for j = 1, n do redis.call('HDEL', KEYS[2], ARGV[i+j]) end
i = i + n + 1
if ARGV[i] ~= '' then redis.call('HSET', KEYS[3], ARGV[i], ARGV[i+1]) end
return 1`)

// errNotLeading: a write fenced by the lease found another controller
// holding it.
var errNotLeading = errors.New("this controller no longer leads placement")

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

// footprints reads the footprints kept; a malformed entry is skipped.
func (s *store) footprints(ctx context.Context) (map[string]uint64, error) {
	return s.sizes(ctx, footprintsKey)
}

// saveFootprints writes footprints, fenced by the lease (errNotLeading).
func (s *store) saveFootprints(ctx context.Context, owner string, epoch uint64, f map[string]uint64) error {
	return s.saveSizes(ctx, footprintsKey, owner, epoch, f)
}

// sizes reads a hash of model -> bytes; a malformed entry is skipped.
func (s *store) sizes(ctx context.Context, key string) (map[string]uint64, error) {
	m, err := s.rdb.HGetAll(ctx, key).Result()
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

// saveSizes writes f into the hash of model -> bytes at key, fenced by
// the lease (errNotLeading).
func (s *store) saveSizes(ctx context.Context, key, owner string, epoch uint64, f map[string]uint64) error {
	args := []any{redislease.Value(owner, epoch)}
	for k, v := range f {
		args = append(args, k, strconv.FormatUint(v, 10))
	}
	n, err := footprintScript.Run(ctx, s.rdb, []string{leaseKey, key}, args...).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return errNotLeading
	}
	return nil
}

// pins reads the operator's pins, model -> executor ids; a malformed
// entry is skipped.
func (s *store) pins(ctx context.Context) (map[string][]string, error) {
	m, err := s.rdb.HGetAll(ctx, pinsKey).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(m))
	for k, v := range m {
		var ids []string
		if json.Unmarshal([]byte(v), &ids) == nil && len(ids) > 0 {
			out[k] = ids
		}
	}
	return out, nil
}

// savePin writes model's pin (no executors: removes it), fenced by the
// lease (errNotLeading).
func (s *store) savePin(ctx context.Context, owner string, epoch uint64, model string, executors []string) error {
	v := ""
	if len(executors) > 0 {
		b, err := json.Marshal(executors)
		if err != nil {
			return err
		}
		v = string(b)
	}
	n, err := pinScript.Run(ctx, s.rdb, []string{leaseKey, pinsKey}, redislease.Value(owner, epoch), model, v).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return errNotLeading
	}
	return nil
}

// loaded reads the models loaded in the cluster (explicit model control),
// with how each was loaded, and, by executor, the generation whose
// startup models were loaded. An entry that does not decode is a load of
// its own without an override: the model stays loaded.
func (s *store) loaded(ctx context.Context) (map[string]loadedModel, map[string]uint64, error) {
	m, err := s.rdb.HGetAll(ctx, loadedKey).Result()
	if err != nil {
		return nil, nil, err
	}
	loaded := make(map[string]loadedModel, len(m))
	for k, v := range m {
		loaded[k] = decodeLoaded(k, v)
	}
	st, err := s.rdb.HGetAll(ctx, startedKey).Result()
	if err != nil {
		return nil, nil, err
	}
	started := make(map[string]uint64, len(st))
	for k, v := range st {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			started[k] = n
		}
	}
	return loaded, started, nil
}

// The values of nereid:placement:loaded that are not an override.
const (
	loadedOwn        = "1"
	loadedDependency = "d"
)

func encodeLoaded(l loadedModel) (string, error) {
	switch {
	case l.override != nil:
		b, err := proto.Marshal(l.override)
		return string(b), err
	case l.dependency:
		return loadedDependency, nil
	}
	return loadedOwn, nil
}

func decodeLoaded(model, v string) loadedModel {
	switch v {
	case loadedOwn:
		return loadedModel{}
	case loadedDependency:
		return loadedModel{dependency: true}
	}
	var req busv1.ModelControlRequest
	if proto.Unmarshal([]byte(v), &req) != nil || req.GetName() != model {
		return loadedModel{}
	}
	return loadedModel{override: &req}
}

// loadedChange is one change of the loaded models: models added (or
// changed) with how they are loaded, models removed, and the executor
// generation whose startup models it adds (executor "" for none).
type loadedChange struct {
	add        map[string]loadedModel
	remove     []string
	executor   string
	generation uint64
}

// saveLoaded writes a change of the loaded models, fenced by the lease
// (errNotLeading).
func (s *store) saveLoaded(ctx context.Context, owner string, epoch uint64, ch loadedChange) error {
	args := []any{redislease.Value(owner, epoch), len(ch.add)}
	for _, m := range slices.Sorted(maps.Keys(ch.add)) {
		v, err := encodeLoaded(ch.add[m])
		if err != nil {
			return err
		}
		args = append(args, m, v)
	}
	args = append(args, len(ch.remove))
	for _, m := range ch.remove {
		args = append(args, m)
	}
	args = append(args, ch.executor, strconv.FormatUint(ch.generation, 10))
	n, err := loadedScript.Run(ctx, s.rdb, []string{leaseKey, loadedKey, startedKey}, args...).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return errNotLeading
	}
	return nil
}

// gpuFootprintsKey is the hash of the GPU footprints measured, model ->
// bytes, kept like the footprints so that a controller taking over packs
// GPUs with what its predecessor learned.
const gpuFootprintsKey = "nereid:placement:gpu_footprints"

// gpuFootprints reads the GPU footprints kept; a malformed entry is
// skipped.
func (s *store) gpuFootprints(ctx context.Context) (map[string]uint64, error) {
	return s.sizes(ctx, gpuFootprintsKey)
}

// saveGPUFootprints writes GPU footprints, fenced by the lease
// (errNotLeading).
func (s *store) saveGPUFootprints(ctx context.Context, owner string, epoch uint64, f map[string]uint64) error {
	return s.saveSizes(ctx, gpuFootprintsKey, owner, epoch, f)
}
