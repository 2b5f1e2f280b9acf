package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/respcache"
)

// The response cache (pkg/respcache) sits in forward: a request for a
// version whose configuration enables response_cache is looked up first;
// a hit is answered here, without the bus, from the response's encoding
// kept in the cache; a miss goes to an executor as any request, and its
// response is queued for storing, which the cache's own goroutine does
// while (or after) the response goes to the client.
//
// An ensemble that is not decoupled is cached the same way at the
// ensemble level (forwardEnsemble): its request is looked up under the
// ensemble's name and version, a hit runs none of its steps, a miss runs
// them (in this gateway or whole on one executor) and its final response
// is stored. Its steps' requests go through forward like any other, so a
// composing model that enables the cache itself is cached on its own, as
// Triton's composing models may be. What an ensemble answers depends on
// its composing models: invalidating a model invalidates the ensembles
// that use it (invalidateLocal).

// producer makes the response to a request the cache did not answer:
// forwardUncached for a model, produceEnsemble for an ensemble.
type producer func(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding) (*inference.ModelInferResponse, *encodedResponse, error)

// forwardCached answers a request to a version with response_cache
// enabled: from the cache on a hit, else from produce, whose response it
// queues for storing.
func (g *Gateway) forwardCached(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, passOn bool, fw *forwarding, produce producer) (*inference.ModelInferResponse, *encodedResponse, error) {
	begin := time.Now()
	l := g.cache.Lookup(ctx, req, vv.versionString())
	if l.Hit {
		b := respcache.WithID(l.Entry, req.GetId())
		if passOn {
			g.cache.Hit(&l, begin)
			return nil, fw.encoded(b), nil
		}
		resp := &fw.resp
		if err := infercodec.UnmarshalResponse(b, resp); err == nil {
			g.cache.Hit(&l, begin)
			return resp, nil, nil
		}
		g.log.Warn("response cache: an entry did not decode; forwarding the request", "model", req.GetModelName())
	}
	resp, enc, err := produce(ctx, vv, req, passOn, fw)
	switch {
	case err != nil:
		g.cache.Miss(&l)
	case enc != nil:
		// The executor's encoding: kept as it is until the cache's
		// writer makes the entry of it.
		g.cache.Store(&l, enc.reply.Bytes, true)
	default:
		// A decoded response may lie in hand-off memory released once it
		// is sent: its entry is encoded now, without the id.
		id := resp.Id
		resp.Id = ""
		b, merr := proto.Marshal(resp)
		resp.Id = id
		if merr == nil {
			g.cache.Store(&l, b, false)
		} else {
			g.cache.Miss(&l)
		}
	}
	return resp, enc, err
}

// invalidateCache makes the responses of model, and of the ensembles
// that use it, unreachable in every gateway's cache: this one's (the
// shared Redis cache's generations with it), and, over the bus, the local
// caches of the others.
func (g *Gateway) invalidateCache(ctx context.Context, model string) {
	if g.cache == nil {
		return
	}
	g.invalidateLocal(ctx, model)
	if err := g.bus.Publish(bus.ResponseCacheInvalidateSubject, wrapperspb.String(model)); err != nil {
		g.log.Warn("response cache: cannot tell the other gateways to invalidate", "model", model, "err", err)
	}
}

// subscribeInvalidations drops from the local cache the models other
// gateways reload. A Redis cache needs nothing: the gateway that reloads
// moves the model's generation in Redis itself.
func (g *Gateway) subscribeInvalidations() (*bus.Subscription, error) {
	if g.cache == nil || g.cache.Kind() != respcache.KindLocal {
		return nil, nil
	}
	return g.bus.Subscribe(bus.ResponseCacheInvalidateSubject, func(ctx context.Context, data []byte) {
		var m wrapperspb.StringValue
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		g.invalidateLocal(ctx, m.GetValue())
	})
}

// invalidateLocal invalidates model in this gateway's cache, and every
// ensemble of this gateway's view that uses it, directly or through other
// ensembles: a reload of a composing model changes what they answer. Each
// gateway expands the model itself, from its own view, so an ensemble it
// knows is invalidated even while the reloading gateway's view lacks it.
func (g *Gateway) invalidateLocal(ctx context.Context, model string) {
	g.cache.Invalidate(ctx, model)
	for _, ens := range g.cat.current().ensemblesUsing(model) {
		g.cache.Invalidate(ctx, ens)
	}
}

// cacheStats is the statistics of the versions in want as this gateway's
// cache fills them (Triton's InferenceStatsAggregator::UpdateSuccessCacheHit
// and UpdateSuccessCacheMiss): a hit is a success, with its whole time,
// and a queue entry of no time, but no inference or execution; a miss
// adds its lookup and insertion time to the request's. Nil without a
// cache.
func (g *Gateway) cacheStats(want []statsKey) *busv1.StatisticsReply {
	if g.cache == nil {
		return nil
	}
	wanted := make(map[statsKey]bool, len(want))
	for _, k := range want {
		wanted[k] = true
	}
	out := &busv1.StatisticsReply{}
	g.cache.EachStats(func(model, version string, s *respcache.VersionStats) {
		if !wanted[statsKey{model, version}] {
			return
		}
		hits, misses := s.Hits.Load(), s.Misses.Load()
		out.ModelStats = append(out.ModelStats, &inference.ModelStatistics{
			Name: model, Version: version,
			InferenceStats: &inference.InferStatistics{
				Success:   &inference.StatisticDuration{Count: hits, Ns: s.HitRequestNs.Load() + s.MissNs.Load()},
				Queue:     &inference.StatisticDuration{Count: hits},
				CacheHit:  &inference.StatisticDuration{Count: hits, Ns: s.HitNs.Load()},
				CacheMiss: &inference.StatisticDuration{Count: misses, Ns: s.MissNs.Load()},
			},
		})
	})
	return out
}

// Triton's per-model cache metrics (core metrics.cc), of this gateway's
// cache, and the cache's own.
var (
	cacheLabels        = []string{"model", "version"}
	descCacheHits      = prometheus.NewDesc("nv_cache_num_hits_per_model", "Number of cache hits per model", cacheLabels, nil)
	descCacheHitDur    = prometheus.NewDesc("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds", cacheLabels, nil)
	descCacheMisses    = prometheus.NewDesc("nv_cache_num_misses_per_model", "Number of cache misses per model", cacheLabels, nil)
	descCacheMissDur   = prometheus.NewDesc("nv_cache_miss_duration_per_model", "Total cache miss (insert+lookup) duration per model, in microseconds", cacheLabels, nil)
	descCacheErrors    = prometheus.NewDesc("nereid_response_cache_errors", "Failed operations of the shared (Redis) response cache, by operation; the requests were served uncached", []string{"op"}, nil)
	descCacheBypassed  = prometheus.NewDesc("nereid_response_cache_bypassed", "Requests served uncached without a lookup while the shared response cache backs off after a failure", nil, nil)
	descCacheDropped   = prometheus.NewDesc("nereid_response_cache_store_dropped", "Responses not stored because the pending stores were full", nil, nil)
	descCacheEvictions = prometheus.NewDesc("nereid_response_cache_evictions", "Entries the local response cache evicted for room", nil, nil)
	descCacheEntries   = prometheus.NewDesc("nereid_response_cache_entries", "Entries in the local response cache", nil, nil)
	descCacheBytes     = prometheus.NewDesc("nereid_response_cache_bytes", "Bytes the local response cache holds, against its size", nil, nil)
)

type cacheCollector struct{ c *respcache.Cache }

func (cc cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCacheHits, descCacheHitDur, descCacheMisses, descCacheMissDur,
		descCacheErrors, descCacheBypassed, descCacheDropped, descCacheEvictions, descCacheEntries, descCacheBytes} {
		ch <- d
	}
}

func (cc cacheCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	cc.c.EachStats(func(model, version string, s *respcache.VersionStats) {
		counter(descCacheHits, s.Hits.Load(), model, version)
		counter(descCacheHitDur, s.HitNs.Load()/1000, model, version)
		counter(descCacheMisses, s.Misses.Load(), model, version)
		counter(descCacheMissDur, s.MissNs.Load()/1000, model, version)
	})
	n := cc.c.Counts()
	counter(descCacheErrors, n.LookupErrors.Load(), string(respcache.OpLookup))
	counter(descCacheErrors, n.InsertErrors.Load(), string(respcache.OpInsert))
	counter(descCacheErrors, n.InvalidateErrors.Load(), string(respcache.OpInvalidate))
	counter(descCacheBypassed, n.Bypassed.Load())
	counter(descCacheDropped, n.Dropped.Load())
	counter(descCacheEvictions, n.Evicted.Load())
	entries, used := cc.c.Local()
	ch <- prometheus.MustNewConstMetric(descCacheEntries, prometheus.GaugeValue, float64(entries))
	ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, float64(used))
}
