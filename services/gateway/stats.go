package gateway

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// statsTimeout bounds one scrape of the executors' (the routers', the
// gateways') statistics.
const statsTimeout = 5 * time.Second

type statsKey struct{ name, version string }

// statistics answers the statistics extension as Triton's
// TRITONSERVER_ServerModelStatistics does (only ready versions are reported,
// with its messages), summing what every executor serving a version reports
// and what every gateway keeps itself.
func (g *Gateway) statistics(ctx context.Context, name, versionStr string) (*inference.ModelStatisticsResponse, error) {
	want, parts, err := g.executorStats(ctx, name, versionStr)
	if err != nil {
		return nil, err
	}
	return sumStats(append(parts, g.sharedStats(ctx, want)...), want), nil
}

// sharedStats asks, in parallel, for the parts of the statistics of the
// versions in want that no executor keeps: the sequence routers' (the
// requests they failed themselves) and every gateway's (gatewayStats).
func (g *Gateway) sharedStats(ctx context.Context, want []statsKey) []*busv1.StatisticsReply {
	var (
		wg  sync.WaitGroup
		gws []*busv1.StatisticsReply
	)
	wg.Go(func() { gws = g.gatewayStats(ctx, want) })
	parts := g.routerStats(ctx, want)
	wg.Wait()
	return append(parts, gws...)
}

// ownStats is this gateway's own part of the statistics of the versions in
// want: the ensembles it ran (ensemble.go) and its response cache's hits
// and misses (respcache.go). Never nil: an empty part still answers a
// gathering gateway.
func (g *Gateway) ownStats(want []statsKey) *busv1.StatisticsReply {
	out := &busv1.StatisticsReply{}
	for _, p := range []*busv1.StatisticsReply{g.ensStats.reply(want), g.cacheStats(want)} {
		out.ModelStats = append(out.ModelStats, p.GetModelStats()...)
	}
	return out
}

// serveGatewayStats answers the gateways gathering the constellation's
// statistics with this gateway's own part (GatewayStatsSubject). Every
// gateway answers (no queue group): each holds only its own counts.
func (g *Gateway) serveGatewayStats() (*bus.Subscription, error) {
	return g.bus.Handle(bus.GatewayStatsSubject, "", func(_ context.Context, data []byte) (proto.Message, error) {
		var req busv1.GatewayStatisticsRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return nil, tritonerr.InvalidArgf("malformed gateway statistics request: %v", err)
		}
		want := make([]statsKey, 0, len(req.GetVersions()))
		for _, v := range req.GetVersions() {
			want = append(want, statsKey{v.GetName(), v.GetVersion()})
		}
		return &busv1.GatewayStatisticsReply{GatewayId: g.id, Stats: g.ownStats(want)}, nil
	})
}

// gatewayStats is every gateway's own part of the statistics of the
// versions in want, each gateway counted once: this one's, read here, and
// the others', gathered over the bus. The gather ends when every other
// gateway this one has heard announce itself (followGateways) has
// answered; one that has not by statsTimeout is left out (and logged), as
// an executor that does not answer is (collectStats): it is most likely
// going away. A gateway not yet heard from is counted if it answers
// before the known ones have.
func (g *Gateway) gatewayStats(ctx context.Context, want []statsKey) []*busv1.StatisticsReply {
	parts := []*busv1.StatisticsReply{g.ownStats(want)}
	pending := map[string]bool{}
	for _, p := range g.gateways.list(time.Now(), bus.HeartbeatExpiry) {
		if p.GetId() != g.id {
			pending[p.GetId()] = true
		}
	}
	if len(pending) == 0 || len(want) == 0 {
		return parts
	}
	req := &busv1.GatewayStatisticsRequest{Versions: make([]*busv1.StatisticsRequest, 0, len(want))}
	for _, k := range want {
		req.Versions = append(req.Versions, &busv1.StatisticsRequest{Name: k.name, Version: k.version})
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	seen := map[string]bool{g.id: true} // this gateway answers its own gather too
	err := g.bus.Gather(ctx, bus.GatewayStatsSubject, req, func(data []byte) bool {
		var rep busv1.GatewayStatisticsReply
		if proto.Unmarshal(data, &rep) != nil || seen[rep.GetGatewayId()] {
			return true
		}
		seen[rep.GetGatewayId()] = true
		delete(pending, rep.GetGatewayId())
		parts = append(parts, rep.GetStats())
		return len(pending) > 0
	})
	if err != nil {
		g.log.Warn("gateway statistics failed", "err", err)
	} else if len(pending) > 0 {
		g.log.Warn("gateway statistics not answered", "gateways", slices.Sorted(maps.Keys(pending)))
	}
	return parts
}

// executorStats asks the executors serving the versions to report (want)
// for their statistics.
func (g *Gateway) executorStats(ctx context.Context, name, versionStr string) ([]statsKey, []*busv1.StatisticsReply, error) {
	version, err := parseVersion(versionStr)
	if err != nil {
		return nil, nil, err
	}
	v := g.cat.current()

	// The versions to report, and which executors to ask.
	var want []statsKey
	execs := map[string]bool{}
	if name == "" {
		names := make([]string, 0, len(v.models))
		for n := range v.models {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			for _, ver := range v.readyVersions(n) {
				vv := v.models[n].versions[ver]
				want = append(want, statsKey{n, vv.versionString()})
				for _, id := range vv.executors {
					execs[id] = true
				}
			}
		}
	} else {
		ready := v.readyVersions(name)
		if len(ready) == 0 {
			return nil, nil, tritonerr.InvalidArgf("requested model '%s' is not available", name)
		}
		if version != latestVersion && !slices.Contains(ready, version) {
			return nil, nil, tritonerr.InvalidArgf("requested model version is not available for model '%s'", name)
		}
		for _, ver := range ready {
			if version != latestVersion && ver != version {
				continue
			}
			vv := v.models[name].versions[ver]
			want = append(want, statsKey{name, vv.versionString()})
			for _, id := range vv.executors {
				execs[id] = true
			}
		}
	}

	// Without a name Triton reports every ready version and ignores the
	// version.
	req := &busv1.StatisticsRequest{Name: name}
	if name != "" && version != latestVersion {
		req.Version = versionStr
	}
	return want, g.collectStats(ctx, execs, req), nil
}

// sumStats adds up the executors' statistics of the versions in want, in
// that order.
func sumStats(parts []*busv1.StatisticsReply, want []statsKey) *inference.ModelStatisticsResponse {

	sums := map[statsKey]*inference.ModelStatistics{}
	for _, p := range parts {
		for _, ms := range p.GetModelStats() {
			k := statsKey{ms.GetName(), ms.GetVersion()}
			if s := sums[k]; s != nil {
				addModelStats(s, ms)
			} else {
				s = emptyModelStats(k)
				addModelStats(s, ms)
				sums[k] = s
			}
		}
	}
	out := &inference.ModelStatisticsResponse{ModelStats: make([]*inference.ModelStatistics, 0, len(want))}
	for _, k := range want {
		s := sums[k]
		if s == nil {
			s = emptyModelStats(k)
		}
		slices.SortFunc(s.BatchStats, func(a, b *inference.InferBatchStatistics) int {
			return compareUint(a.GetBatchSize(), b.GetBatchSize())
		})
		out.ModelStats = append(out.ModelStats, s)
	}
	return out
}

// collectStats asks the given executors in parallel. An executor that does
// not answer is left out (and logged) rather than failing the whole call:
// it is most likely going away, and its catalog entry with it.
func (g *Gateway) collectStats(ctx context.Context, execs map[string]bool, req *busv1.StatisticsRequest) []*busv1.StatisticsReply {
	return askAll(ctx, slices.Collect(maps.Keys(execs)), func(ctx context.Context, id string) *busv1.StatisticsReply {
		var resp busv1.StatisticsReply
		if err := g.bus.Request(ctx, bus.ExecutorStatsSubject(id), req, &resp); err != nil {
			g.log.Warn("executor statistics failed", "executor", id, "err", err)
			return nil
		}
		return &resp
	})
}

// askAll runs ask for every key in parallel, within statsTimeout, and
// returns the replies of those that answered (ask returns nil for none).
func askAll[K any](ctx context.Context, keys []K, ask func(context.Context, K) *busv1.StatisticsReply) []*busv1.StatisticsReply {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		parts []*busv1.StatisticsReply
	)
	for _, k := range keys {
		wg.Go(func() {
			if r := ask(ctx, k); r != nil {
				mu.Lock()
				parts = append(parts, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return parts
}

// routerStats asks the sequence routers serving the versions in want that
// have a sequence batcher for their part of the metrics: the requests they
// hold (pending) and those they failed. A version no router serves yet
// has none.
func (g *Gateway) routerStats(ctx context.Context, want []statsKey) []*busv1.StatisticsReply {
	v := g.cat.current()
	var seqs []statsKey
	for _, k := range want {
		mv := v.models[k.name]
		if mv == nil {
			continue
		}
		for _, vv := range mv.versions {
			if vv.versionString() == k.version && vv.config.GetSequenceBatching() != nil {
				seqs = append(seqs, k)
			}
		}
	}
	if len(seqs) == 0 {
		return nil
	}
	return askAll(ctx, seqs, func(ctx context.Context, k statsKey) *busv1.StatisticsReply {
		var resp busv1.StatisticsReply
		if err := g.bus.Request(ctx, bus.SequenceStatsSubject(k.name, k.version), &busv1.StatisticsRequest{Name: k.name, Version: k.version}, &resp); err != nil {
			g.log.Debug("sequence router metrics", "model", k.name, "version", k.version, "err", err)
			return nil
		}
		return &resp
	})
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func emptyDuration() *inference.StatisticDuration { return &inference.StatisticDuration{} }

func emptyModelStats(k statsKey) *inference.ModelStatistics {
	return &inference.ModelStatistics{
		Name:    k.name,
		Version: k.version,
		InferenceStats: &inference.InferStatistics{
			Success: emptyDuration(), Fail: emptyDuration(), Queue: emptyDuration(),
			ComputeInput: emptyDuration(), ComputeInfer: emptyDuration(), ComputeOutput: emptyDuration(),
			CacheHit: emptyDuration(), CacheMiss: emptyDuration(),
		},
		ResponseStats: map[string]*inference.InferResponseStatistics{},
		BatchStats:    []*inference.InferBatchStatistics{},
		MemoryUsage:   []*inference.MemoryUsage{},
	}
}

func addDuration(dst **inference.StatisticDuration, src *inference.StatisticDuration) {
	if *dst == nil {
		*dst = emptyDuration()
	}
	(*dst).Count += src.GetCount()
	(*dst).Ns += src.GetNs()
}

// addModelStats adds src into dst: counts and durations sum, the last
// inference is the latest of all, batch statistics are matched by size.
func addModelStats(dst, src *inference.ModelStatistics) {
	dst.LastInference = max(dst.LastInference, src.GetLastInference())
	dst.InferenceCount += src.GetInferenceCount()
	dst.ExecutionCount += src.GetExecutionCount()
	is, ss := dst.InferenceStats, src.GetInferenceStats()
	addDuration(&is.Success, ss.GetSuccess())
	addDuration(&is.Fail, ss.GetFail())
	addDuration(&is.Queue, ss.GetQueue())
	addDuration(&is.ComputeInput, ss.GetComputeInput())
	addDuration(&is.ComputeInfer, ss.GetComputeInfer())
	addDuration(&is.ComputeOutput, ss.GetComputeOutput())
	addDuration(&is.CacheHit, ss.GetCacheHit())
	addDuration(&is.CacheMiss, ss.GetCacheMiss())
	for k, rs := range src.GetResponseStats() {
		d := dst.ResponseStats[k]
		if d == nil {
			d = &inference.InferResponseStatistics{}
			dst.ResponseStats[k] = d
		}
		addDuration(&d.ComputeInfer, rs.GetComputeInfer())
		addDuration(&d.ComputeOutput, rs.GetComputeOutput())
		addDuration(&d.Success, rs.GetSuccess())
		addDuration(&d.Fail, rs.GetFail())
		addDuration(&d.EmptyResponse, rs.GetEmptyResponse())
		addDuration(&d.Cancel, rs.GetCancel())
	}
	for _, bs := range src.GetBatchStats() {
		var d *inference.InferBatchStatistics
		for _, have := range dst.BatchStats {
			if have.BatchSize == bs.GetBatchSize() {
				d = have
				break
			}
		}
		if d == nil {
			d = &inference.InferBatchStatistics{BatchSize: bs.GetBatchSize()}
			dst.BatchStats = append(dst.BatchStats, d)
		}
		addDuration(&d.ComputeInput, bs.GetComputeInput())
		addDuration(&d.ComputeInfer, bs.GetComputeInfer())
		addDuration(&d.ComputeOutput, bs.GetComputeOutput())
	}
	for _, mu := range src.GetMemoryUsage() {
		dst.MemoryUsage = append(dst.MemoryUsage, &inference.MemoryUsage{Type: mu.GetType(), Id: mu.GetId(), ByteSize: mu.GetByteSize()})
	}
}
