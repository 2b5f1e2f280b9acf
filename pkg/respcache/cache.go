package respcache

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nereid-io/nereid/api/inference"
)

// Op is what a failure of the shared store was doing.
type Op string

// The operations of the shared store.
const (
	OpLookup     Op = "lookup"
	OpInsert     Op = "insert"
	OpInvalidate Op = "invalidate"
)

// Redis backoff after a failure: lookups skip Redis (requests go uncached)
// for a while, doubling up to the maximum while it keeps failing.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
	// errorLogEvery spaces the logged errors of the shared store: under
	// load a Redis that went away would otherwise log per request.
	errorLogEvery = 10 * time.Second
	// pendingSlots bounds the number of stores waiting, beside their bytes.
	pendingSlots = 4096
)

// Cache is a gateway's response cache: a local LRU or a Redis store, the
// models' generations, the stores waiting to be written (Run writes them)
// and the counts the gateway reports. Its methods are safe for concurrent
// use.
type Cache struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu  sync.Mutex
	lru *LRU // local; nil for redis
	// gens are the models' generations (model → *atomic.Uint64): a reload
	// increments the model's, so entries stored for the generation before
	// it are never found again. The local cache's are its own; a Redis
	// cache's are the last it saw in Redis, which every lookup checks.
	gens sync.Map

	redis *redisStore

	pending      chan pendingStore
	pendingBytes atomic.Int64

	stats   sync.Map // versionKey → *VersionStats
	counts  Counts
	errMu   sync.Mutex
	downTil time.Time     // Redis skipped until then
	backoff time.Duration // the next backoff
	lastLog time.Time
	quiet   int // errors not logged since lastLog
}

// Counts are the cache's own figures.
type Counts struct {
	// Errors of the shared store, by operation (lookup, insert,
	// invalidate).
	LookupErrors, InsertErrors, InvalidateErrors atomic.Uint64
	// Bypassed are lookups not made while the shared store backs off
	// after a failure (served uncached).
	Bypassed atomic.Uint64
	// Dropped are responses not stored: the pending stores were full.
	Dropped atomic.Uint64
	// Evicted are entries the local cache evicted for room.
	Evicted atomic.Uint64
}

type versionKey struct{ model, version string }

// VersionStats are a model version's cache figures, as Triton's statistics
// and metrics report them (model.cc, infer_stats.cc): hits with the time
// looking them up and the whole request's time, misses with the time
// looking up and inserting.
type VersionStats struct {
	Hits, HitNs, HitRequestNs atomic.Uint64
	Misses, MissNs            atomic.Uint64
}

type pendingStore struct {
	model, version string
	gen            uint64
	key            Key
	value          []byte // an entry, or an encoded response when raw
	raw            bool
	cost           int64
	lookupNs       uint64
}

// New returns the cache cfg configures; nil when cfg configures none. A
// Redis cache connects on first use: Redis away at start is Redis down.
func New(cfg Config, log *slog.Logger) (*Cache, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.PendingBytes <= 0 {
		cfg.PendingBytes = DefaultPendingBytes
	}
	c := &Cache{cfg: cfg, log: log, now: time.Now, pending: make(chan pendingStore, pendingSlots), backoff: backoffMin}
	switch cfg.Kind {
	case KindLocal:
		c.lru = NewLRU(cfg.Size)
	case KindRedis:
		s, err := newRedisStore(cfg)
		if err != nil {
			return nil, err
		}
		c.redis = s
		log.Info("response cache in Redis", "addr", s.rdb.Options().Addr, "db", cfg.Redis.DB, "ttl", cfg.TTL, "prefix", cfg.Prefix)
	}
	return c, nil
}

// Kind is the cache's implementation.
func (c *Cache) Kind() Kind { return c.cfg.Kind }

// Counts are the cache's own figures.
func (c *Cache) Counts() *Counts { return &c.counts }

// Close releases the Redis connections.
func (c *Cache) Close() error {
	if c.redis != nil {
		return c.redis.rdb.Close()
	}
	return nil
}

// Lookup is the outcome of looking a request up.
type Lookup struct {
	// Hit: Entry answers the request (WithID gives it the request's id).
	Hit   bool
	Entry []byte
	// Store: a response to the request may be stored (Store) under
	// key and generation; false for a request the cache does not take
	// (ErrNotCacheable) or when the shared store failed.
	store          bool
	model, version string
	key            Key
	gen            uint64
	start          time.Time
	lookupNs       uint64
}

func (c *Cache) gen(model string) *atomic.Uint64 {
	if g, ok := c.gens.Load(model); ok {
		return g.(*atomic.Uint64)
	}
	g, _ := c.gens.LoadOrStore(model, new(atomic.Uint64))
	return g.(*atomic.Uint64)
}

// Lookup looks req up for version of its model. A request the cache does
// not take, or one the shared store fails on, is a miss that is not
// stored; it never fails.
func (c *Cache) Lookup(ctx context.Context, req *inference.ModelInferRequest, version string) Lookup {
	start := c.now()
	model := req.GetModelName()
	l := Lookup{model: model, version: version, start: start}
	switch {
	case c.lru != nil:
		gen := c.gen(model).Load()
		k, err := Sum(req, version, gen)
		if err != nil {
			return l
		}
		l.key, l.gen, l.store = k, gen, true
		c.mu.Lock()
		l.Entry, l.Hit = c.lru.Get(k, start)
		c.mu.Unlock()
	case c.redis != nil:
		if !c.redisUp(start) {
			c.counts.Bypassed.Add(1)
			return l
		}
		k, err := Sum(req, version, 0) // the generation is in the Redis key
		if err != nil {
			return l
		}
		g := c.gen(model)
		v, gen, err := c.redis.lookup(ctx, model, version, g.Load(), k)
		if err != nil {
			c.failed(OpLookup, err)
			return l
		}
		g.Store(gen)
		c.succeeded()
		l.key, l.gen, l.store = k, gen, true
		l.Entry, l.Hit = v, v != nil
	}
	l.lookupNs = uint64(c.now().Sub(start))
	return l
}

// Hit records that l, a hit, answered its request: Triton's cache hit
// statistics, with the request's whole time measured from begin.
func (c *Cache) Hit(l *Lookup, begin time.Time) {
	s := c.Stats(l.model, l.version)
	s.Hits.Add(1)
	s.HitNs.Add(l.lookupNs)
	s.HitRequestNs.Add(uint64(c.now().Sub(begin)))
}

// Store queues the response to l's request for storing, and counts the
// miss. resp is the response as protobuf encodes it; raw: with its id
// still in it (Entry is made by the writer, after the response has gone),
// else already an Entry the cache may keep as it is. resp must not change
// afterwards. Beyond the
// pending bound the response is not stored.
func (c *Cache) Store(l *Lookup, resp []byte, raw bool) {
	if !l.store {
		return
	}
	s := c.Stats(l.model, l.version)
	s.Misses.Add(1)
	s.MissNs.Add(l.lookupNs)
	cost := Cost(len(resp))
	if c.pendingBytes.Add(cost) > c.cfg.PendingBytes {
		c.pendingBytes.Add(-cost)
		c.counts.Dropped.Add(1)
		return
	}
	select {
	case c.pending <- pendingStore{model: l.model, version: l.version, gen: l.gen, key: l.key, value: resp, raw: raw, cost: cost, lookupNs: l.lookupNs}:
	default:
		c.pendingBytes.Add(-cost)
		c.counts.Dropped.Add(1)
	}
}

// Miss counts a miss whose response is not stored (the request failed):
// only its lookup time.
func (c *Cache) Miss(l *Lookup) {
	if !l.store {
		return
	}
	s := c.Stats(l.model, l.version)
	s.Misses.Add(1)
	s.MissNs.Add(l.lookupNs)
}

// Run writes the pending stores until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-c.pending:
			c.write(ctx, p)
			c.pendingBytes.Add(-p.cost)
		}
	}
}

// Flush writes the stores pending now (tests, and before a reload's
// invalidation).
func (c *Cache) Flush(ctx context.Context) {
	for {
		select {
		case p := <-c.pending:
			c.write(ctx, p)
			c.pendingBytes.Add(-p.cost)
		default:
			return
		}
	}
}

func (c *Cache) write(ctx context.Context, p pendingStore) {
	start := c.now()
	v := p.value
	if p.raw {
		var err error
		if v, err = Entry(v); err != nil {
			c.log.Warn("response cache: a response did not parse; not stored", "model", p.model, "version", p.version, "err", err)
			return
		}
	}
	switch {
	case c.lru != nil:
		if c.gen(p.model).Load() != p.gen {
			return // the model was reloaded meanwhile
		}
		c.mu.Lock()
		n := c.lru.Add(p.key, p.model, v, start, c.cfg.TTL)
		c.mu.Unlock()
		c.counts.Evicted.Add(uint64(n))
	case c.redis != nil:
		if !c.redisUp(start) {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, c.insertTimeout())
		err := c.redis.insert(ctx, p.model, p.version, p.gen, p.key, v)
		cancel()
		if err != nil {
			c.failed(OpInsert, err)
			return
		}
		c.succeeded()
	}
	c.Stats(p.model, p.version).MissNs.Add(uint64(c.now().Sub(start)))
}

func (c *Cache) insertTimeout() time.Duration {
	if t := c.cfg.Redis.SocketTimeout; t > 0 {
		return 2 * t
	}
	return time.Minute
}

// Invalidate makes every entry of model unreachable: the model was (or is
// being) reloaded. The local cache also frees them at once.
func (c *Cache) Invalidate(ctx context.Context, model string) {
	switch {
	case c.lru != nil:
		c.gen(model).Add(1)
		c.mu.Lock()
		c.lru.Drop(model)
		c.mu.Unlock()
	case c.redis != nil:
		gen, err := c.redis.invalidate(ctx, model)
		if err != nil {
			c.failed(OpInvalidate, err)
			return
		}
		c.gen(model).Store(gen)
	}
}

// Stats are the figures of a model version (made on first use).
func (c *Cache) Stats(model, version string) *VersionStats {
	k := versionKey{model, version}
	if s, ok := c.stats.Load(k); ok {
		return s.(*VersionStats)
	}
	s, _ := c.stats.LoadOrStore(k, new(VersionStats))
	return s.(*VersionStats)
}

// EachStats calls f with the figures of every version that has any.
func (c *Cache) EachStats(f func(model, version string, s *VersionStats)) {
	c.stats.Range(func(k, v any) bool {
		vk := k.(versionKey)
		f(vk.model, vk.version, v.(*VersionStats))
		return true
	})
}

// Pending is the number of stores waiting or being written.
func (c *Cache) Pending() int64 { return c.pendingBytes.Load() }

// Local reports the local cache's entries and bytes (zeros for Redis).
func (c *Cache) Local() (entries int, used int64) {
	if c.lru == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.lru.Used()
}

func (c *Cache) redisUp(now time.Time) bool {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return !now.Before(c.downTil)
}

func (c *Cache) succeeded() {
	c.errMu.Lock()
	c.backoff = backoffMin
	c.errMu.Unlock()
}

// failed counts a failure of the shared store, backs off and logs it (at
// most once per errorLogEvery, with how many were not logged).
func (c *Cache) failed(op Op, err error) {
	switch op {
	case OpLookup:
		c.counts.LookupErrors.Add(1)
	case OpInsert:
		c.counts.InsertErrors.Add(1)
	case OpInvalidate:
		c.counts.InvalidateErrors.Add(1)
	}
	now := c.now()
	c.errMu.Lock()
	c.downTil = now.Add(c.backoff)
	c.backoff = min(2*c.backoff, backoffMax)
	log := now.Sub(c.lastLog) >= errorLogEvery
	quiet := c.quiet
	if log {
		c.lastLog, c.quiet = now, 0
	} else {
		c.quiet++
	}
	c.errMu.Unlock()
	if log {
		c.log.Error("response cache: Redis failed; requests are served uncached", "op", string(op), "err", err, "errors_not_logged", quiet)
	}
}
