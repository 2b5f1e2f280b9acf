package shmregistry

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// store keeps the regions and their holds. Every method is atomic with
// respect to every registry sharing the store.
type store interface {
	// Register adds r; a taken name is ALREADY_EXISTS.
	Register(ctx context.Context, r *busv1.ShmRegion) error
	// Get returns the named region, or nil.
	Get(ctx context.Context, name string) (*busv1.ShmRegion, error)
	// List returns every region.
	List(ctx context.Context) ([]*busv1.ShmRegion, error)
	// Unregister removes the named region if it is of kind and nobody
	// holds it (removed), or marks it awaiting unregister (deferred). An
	// unknown name, or a region of another kind, is left alone.
	Unregister(ctx context.Context, name string, kind busv1.ShmKind, now time.Time) (removed *busv1.ShmRegion, deferred bool, err error)
	// Acquire holds, for holder and until expires, those of names that
	// exist.
	Acquire(ctx context.Context, holder string, names []string, expires time.Time) (found []*busv1.ShmRegion, missing []string, err error)
	// Release ends holder's holds on names and returns the regions that
	// awaited unregister and are now removed.
	Release(ctx context.Context, holder string, names []string, now time.Time) ([]*busv1.ShmRegion, error)
	// Sweep drops lapsed holds and removes the awaiting regions left
	// without any.
	Sweep(ctx context.Context, now time.Time) ([]*busv1.ShmRegion, error)
	Close() error
}

func alreadyExists(name string) error {
	return tritonerr.New(tritonerr.AlreadyExists, "shared memory region '%s' already in manager", name)
}

// memStore is the standalone mode's store: one process, one map.
type memStore struct {
	mu      sync.Mutex
	regions map[string]*memEntry
}

type memEntry struct {
	region   *busv1.ShmRegion
	holds    map[string]time.Time // holder -> expiry
	awaiting bool
}

func newMemStore() *memStore { return &memStore{regions: map[string]*memEntry{}} }

func (s *memStore) Register(_ context.Context, r *busv1.ShmRegion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.regions[r.GetName()]; ok {
		return alreadyExists(r.GetName())
	}
	s.regions[r.GetName()] = &memEntry{region: cloneRegion(r), holds: map[string]time.Time{}}
	return nil
}

func (s *memStore) Get(_ context.Context, name string) (*busv1.ShmRegion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.regions[name]; ok {
		return e.view(), nil
	}
	return nil, nil
}

func (s *memStore) List(context.Context) ([]*busv1.ShmRegion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*busv1.ShmRegion, 0, len(s.regions))
	for _, e := range s.regions {
		out = append(out, e.view())
	}
	return out, nil
}

func (e *memEntry) view() *busv1.ShmRegion {
	r := cloneRegion(e.region)
	r.AwaitingUnregister = e.awaiting
	return r
}

// live drops lapsed holds and reports whether any is left.
func (e *memEntry) live(now time.Time) bool {
	for h, exp := range e.holds {
		if !exp.After(now) {
			delete(e.holds, h)
		}
	}
	return len(e.holds) > 0
}

func (s *memStore) Unregister(_ context.Context, name string, kind busv1.ShmKind, now time.Time) (*busv1.ShmRegion, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.regions[name]
	if !ok || e.region.GetKind() != kind {
		return nil, false, nil
	}
	if e.live(now) {
		e.awaiting = true
		return nil, true, nil
	}
	delete(s.regions, name)
	return e.region, false, nil
}

func (s *memStore) Acquire(_ context.Context, holder string, names []string, expires time.Time) ([]*busv1.ShmRegion, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []*busv1.ShmRegion
	var missing []string
	for _, n := range names {
		e, ok := s.regions[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		e.holds[holder] = expires
		found = append(found, e.view())
	}
	return found, missing, nil
}

func (s *memStore) Release(_ context.Context, holder string, names []string, now time.Time) ([]*busv1.ShmRegion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var removed []*busv1.ShmRegion
	for _, n := range names {
		e, ok := s.regions[n]
		if !ok {
			continue
		}
		delete(e.holds, holder)
		if e.awaiting && !e.live(now) {
			delete(s.regions, n)
			removed = append(removed, e.region)
		}
	}
	return removed, nil
}

func (s *memStore) Sweep(_ context.Context, now time.Time) ([]*busv1.ShmRegion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var removed []*busv1.ShmRegion
	for n, e := range s.regions {
		if e.awaiting && !e.live(now) {
			delete(s.regions, n)
			removed = append(removed, e.region)
		}
	}
	return removed, nil
}

func (s *memStore) Close() error { return nil }

func cloneRegion(r *busv1.ShmRegion) *busv1.ShmRegion {
	c := &busv1.ShmRegion{
		Name: r.GetName(), Kind: r.GetKind(), Node: r.GetNode(), Id: r.GetId(), ByteSize: r.GetByteSize(),
		Key: r.GetKey(), Offset: r.GetOffset(), DeviceId: r.GetDeviceId(), AwaitingUnregister: r.GetAwaitingUnregister(),
	}
	c.RawHandle = slices.Clone(r.GetRawHandle())
	return c
}
