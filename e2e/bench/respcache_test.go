package bench

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
	"github.com/nereid-io/nereid/pkg/respcache"
	"github.com/nereid-io/nereid/services/standalone"
)

// The response cache (issue 29): one standalone server (in-process bus
// off: the constellation's path) serves the identity model twice, as
// identity_uncached and as identity_cached with response_cache on, so
// that both sides of each ratio run on the same server:
//
//   - 64 B, gRPC unary, c=1: a local cache hit against the same request
//     uncached (target p50 <= 0.6x), and a Redis cache hit (a real
//     redis-server) against it (target p50 <= 1.0x);
//   - 16 MiB (the identity's output is its input), gRPC unary, c=1: a local
//     hit against the uncached request (target req/s >= 2x).

const (
	uncachedModel = "identity_uncached"
	cachedModel   = "identity_cached"
)

func init() {
	comparisons = append(comparisons,
		comparison{"respcache-local-hit-64B-grpc-unary/c1", "respcache-uncached-64B-grpc-unary/c1", latency, 0.6, 0},
		comparison{"respcache-redis-hit-64B-grpc-unary/c1", "respcache-uncached-redis-64B-grpc-unary/c1", latency, 1.0, 0},
		comparison{"respcache-local-hit-16MiB-grpc-unary/c1", "respcache-uncached-16MiB-grpc-unary/c1", throughput, 2.0, 0},
	)
}

// cacheServer starts a standalone server with cache and the two models.
func cacheServer(b *testing.B, cache respcache.Config) string {
	b.Helper()
	src, err := RepoDir()
	if err != nil {
		b.Fatal(err)
	}
	cfgText, err := os.ReadFile(filepath.Join(src, Model, "config.pbtxt"))
	if err != nil {
		b.Fatal(err)
	}
	repo := b.TempDir()
	for _, name := range []string{uncachedModel, cachedModel} {
		if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
			b.Fatal(err)
		}
		text := strings.Replace(string(cfgText), fmt.Sprintf("name: %q", Model), fmt.Sprintf("name: %q", name), 1)
		if name == cachedModel {
			text += "\nresponse_cache { enable: true }\n"
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Models = []string{uncachedModel, cachedModel}
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.InProcessBus = false
	cfg.ResponseCache = cache
	s, stop, err := runStandalone(cfg, uncachedModel, cachedModel)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return s.Gateway().GRPCAddr()
}

func BenchmarkResponseCache(b *testing.B) {
	local := respcache.Config{Kind: respcache.KindLocal, Size: 256 << 20}
	pair := func(b *testing.B, addr, baseKey, key string, size, warm int) {
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, addr))
		payload := FP32Payload(size)
		measurePair(b, baseKey, key, 1, warm,
			InferUnary(c, modelRequest(uncachedModel, payload)), InferUnary(c, modelRequest(cachedModel, payload)))
	}
	b.Run("local-hit-vs-uncached/64B/c=1", func(b *testing.B) {
		pair(b, cacheServer(b, local), "respcache-uncached-64B-grpc-unary/c1", "respcache-local-hit-64B-grpc-unary/c1", small, warmSmall)
	})
	b.Run("redis-hit-vs-uncached/64B/c=1", func(b *testing.B) {
		rdb := redistest.Plain(b)
		host, port, _ := net.SplitHostPort(rdb.Options().Addr)
		p, _ := strconv.Atoi(port)
		cache := respcache.Config{Kind: respcache.KindRedis, Prefix: respcache.DefaultPrefix,
			Redis: respcache.RedisConfig{Host: host, Port: p, ConnectTimeout: respcache.DefaultRedisTimeout,
				SocketTimeout: respcache.DefaultRedisTimeout, WaitTimeout: respcache.DefaultWaitTimeout}}
		pair(b, cacheServer(b, cache), "respcache-uncached-redis-64B-grpc-unary/c1", "respcache-redis-hit-64B-grpc-unary/c1", small, warmSmall)
	})
	b.Run("local-hit-vs-uncached/16MiB/c=1", func(b *testing.B) {
		pair(b, cacheServer(b, local), "respcache-uncached-16MiB-grpc-unary/c1", "respcache-local-hit-16MiB-grpc-unary/c1", large, warmLarge)
	})
}
