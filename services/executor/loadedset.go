package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

// The set of models loaded through the repository API in explicit mode
// lives in a JetStream key-value bucket (bus.LoadedModelsBucket): the NATS
// servers the services already meet on keep it, on disk, so it survives
// every executor restarting at once, and a new executor finds it without
// any other service running. Each key is a model; its value the load
// request (name, config override, model files), so that a restored model
// is the one the constellation serves, overrides included. Every executor
// writes what it loaded or unloaded (the same value: the writes are
// idempotent), in the order its control requests arrive.
//
// A NATS deployment without JetStream still works: executors then load,
// at start, what the running executors serve (loadedByPeers), and the set
// is lost when they all stop.

// setTimeout bounds each exchange with JetStream: a missing or refused
// JetStream must not hold an executor's start.
const setTimeout = 5 * time.Second

// loadedSet is the bucket, opened.
type loadedSet struct {
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	maxValue int // largest value kept whole; larger loads lose their files
}

// openLoadedSet opens the bucket, creating it the first time.
func openLoadedSet(ctx context.Context, nc *nats.Conn) (*loadedSet, error) {
	ctx, cancel := context.WithTimeout(ctx, setTimeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bus.LoadedModelsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bus.LoadedModelsBucket,
			Description: "models loaded through Nereid's repository API (explicit model control mode)",
			Storage:     jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another executor made it meanwhile
			kv, err = js.KeyValue(ctx, bus.LoadedModelsBucket)
		}
	}
	if err != nil {
		return nil, err
	}
	// Room for the headers JetStream adds to a put.
	return &loadedSet{js: js, kv: kv, maxValue: int(nc.MaxPayload()) - 4096}, nil
}

// list returns the load requests of the set, by model name.
func (s *loadedSet) list(ctx context.Context) ([]*busv1.ModelControlRequest, error) {
	ctx, cancel := context.WithTimeout(ctx, setTimeout)
	defer cancel()
	// The stream's subjects are the keys written: listing them costs no
	// consumer (and no permission for one).
	st, err := s.js.Stream(ctx, bus.LoadedModelsStream())
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.LoadedModelsKeyPrefix+">"))
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, bus.LoadedModelsKeyPrefix)
		if _, err := bus.ParseLoadedModelKey(key); err != nil {
			continue // not written by an executor
		}
		keys = append(keys, key)
	}
	slices.Sort(keys)
	var out []*busv1.ModelControlRequest
	for _, key := range keys {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // unloaded: a purge marker
		}
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", key, err)
		}
		req := &busv1.ModelControlRequest{}
		if err := proto.Unmarshal(e.Value(), req); err != nil || req.GetName() == "" {
			return nil, fmt.Errorf("key %s: not a model load request", key)
		}
		out = append(out, req)
	}
	return out, nil
}

// put records a load. Files too large to keep are left out and the record
// says so.
func (s *loadedSet) put(ctx context.Context, req *busv1.ModelControlRequest) error {
	ctx, cancel := context.WithTimeout(ctx, setTimeout)
	defer cancel()
	rec := &busv1.ModelControlRequest{Name: req.GetName(), Load: true, Config: req.GetConfig(), Files: req.GetFiles()}
	data, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	if len(data) > s.maxValue {
		rec.Files, rec.FilesNotKept = nil, true
		if data, err = proto.Marshal(rec); err != nil {
			return err
		}
	}
	_, err = s.kv.Put(ctx, bus.LoadedModelKey(req.GetName()), data)
	return err
}

// remove records an unload: the key's history goes with it. An unload of
// a model the set does not hold writes nothing, so that unloads of
// arbitrary names leave no markers behind.
func (s *loadedSet) remove(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, setTimeout)
	defer cancel()
	key := bus.LoadedModelKey(name)
	if _, err := s.kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return s.kv.Purge(ctx, key)
}
