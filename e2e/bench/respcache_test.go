package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
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
//     redis-server) against it (target p50 <= 1.0x), in this server and
//     again in a constellation of processes (nats-server, an executor and
//     a gateway), where a request that is not cached crosses processes as
//     it does when deployed, while here it stays in this process;
//   - a 16 MiB output from a 64 B input (the identity's output_repeat
//     parameter repeats the input 262144 times), gRPC unary, c=1: a local
//     hit, which skips the executor's writing of the output and its
//     transfer over the bus, against the uncached request (target req/s
//     >= 2x). The request is small as in the 64 B pairs: what differs is
//     the output only. The output rides the bus (hand-off off), as from
//     an executor on another node; the same pair with the executor's
//     output handed over in this process (hand-off as slices, the
//     standalone server's and a co-located executor's path, where the
//     uncached request transfers nothing either) is reported beside it.

const (
	uncachedModel = "identity_uncached"
	cachedModel   = "identity_cached"
)

func init() {
	comparisons = append(comparisons,
		comparison{"respcache-local-hit-64B-grpc-unary/c1", "respcache-uncached-64B-grpc-unary/c1", latency, 0.6, 0},
		comparison{"respcache-redis-hit-64B-grpc-unary/c1", "respcache-uncached-redis-64B-grpc-unary/c1", latency, 1.0, 0},
		comparison{"respcache-redis-hit-64B-grpc-unary-constellation/c1", "respcache-uncached-redis-64B-grpc-unary-constellation/c1", latency, 1.0, 0},
		comparison{"respcache-local-hit-16MiB-grpc-unary/c1", "respcache-uncached-16MiB-grpc-unary/c1", throughput, 2.0, 0},
		comparison{"respcache-local-hit-16MiB-handoff-grpc-unary/c1", "respcache-uncached-16MiB-handoff-grpc-unary/c1", throughput, 0, 0},
	)
}

// largeRepeat makes the 64 B input a 16 MiB output.
const largeRepeat = large / small

// cacheRepo writes a model repository of the two models, whose
// configurations get extra (parameters) added.
func cacheRepo(b *testing.B, extra string) string {
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
		text := strings.Replace(string(cfgText), fmt.Sprintf("name: %q", Model), fmt.Sprintf("name: %q", name), 1) + extra
		if name == cachedModel {
			text += "\nresponse_cache { enable: true }\n"
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return repo
}

// cacheServer starts a standalone server with cache and the two models,
// whose configurations get extra (parameters) added.
func cacheServer(b *testing.B, cache respcache.Config, extra string, handoff int) string {
	b.Helper()
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = cacheRepo(b, extra)
	cfg.Models = []string{uncachedModel, cachedModel}
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.InProcessBus = false
	cfg.ResponseCache = cache
	cfg.HandoffThreshold = handoff
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
	// repeated: 64 B in, 16 MiB out, checked against the repeated input.
	repeated := func(b *testing.B, addr, baseKey, key string) {
		c := inference.NewGRPCInferenceServiceClient(fx.conn(b, addr))
		payload := FP32Payload(small)
		want := bytes.Repeat(payload, largeRepeat)
		measurePair(b, baseKey, key, 1, warmLarge,
			inferUnaryWant(c, modelRequest(uncachedModel, payload), want), inferUnaryWant(c, modelRequest(cachedModel, payload), want))
	}
	b.Run("local-hit-vs-uncached/64B/c=1", func(b *testing.B) {
		pair(b, cacheServer(b, local, "", 0), "respcache-uncached-64B-grpc-unary/c1", "respcache-local-hit-64B-grpc-unary/c1", small, warmSmall)
	})
	b.Run("redis-hit-vs-uncached/64B/c=1", func(b *testing.B) {
		rdb := redistest.Plain(b)
		host, port, _ := net.SplitHostPort(rdb.Options().Addr)
		p, _ := strconv.Atoi(port)
		cache := respcache.Config{Kind: respcache.KindRedis, Prefix: respcache.DefaultPrefix,
			Redis: respcache.RedisConfig{Host: host, Port: p, ConnectTimeout: respcache.DefaultRedisTimeout,
				SocketTimeout: respcache.DefaultRedisTimeout, WaitTimeout: respcache.DefaultWaitTimeout}}
		pair(b, cacheServer(b, cache, "", 0), "respcache-uncached-redis-64B-grpc-unary/c1", "respcache-redis-hit-64B-grpc-unary/c1", small, warmSmall)
	})
	// The same pair in the constellation as deployed: nats-server, an
	// executor and a gateway, each its own process, and redis-server.
	b.Run("redis-hit-vs-uncached/64B/constellation/c=1", func(b *testing.B) {
		rdb := redistest.Plain(b)
		host, port, _ := net.SplitHostPort(rdb.Options().Addr)
		cl := constellation.NewCluster(b)
		cl.Executor(cacheRepo(b, ""), "e1")
		gw := cl.Gateway("--cache-config", "redis,host="+host, "--cache-config", "redis,port="+port)
		for _, m := range []string{uncachedModel, cachedModel} {
			if err := waitReady(gw.HTTP()+"/v2/models/"+m+"/ready", 60*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		pair(b, gw.GRPC(), "respcache-uncached-redis-64B-grpc-unary-constellation/c1", "respcache-redis-hit-64B-grpc-unary-constellation/c1", small, warmSmall)
	})
	repeat := fmt.Sprintf("parameters { key: \"output_repeat\" value { string_value: \"%d\" } }\n", largeRepeat)
	b.Run("local-hit-vs-uncached/16MiB/c=1", func(b *testing.B) {
		repeated(b, cacheServer(b, local, repeat, -1), "respcache-uncached-16MiB-grpc-unary/c1", "respcache-local-hit-16MiB-grpc-unary/c1")
	})
	b.Run("local-hit-vs-uncached/16MiB-handoff/c=1", func(b *testing.B) {
		repeated(b, cacheServer(b, local, repeat, 0), "respcache-uncached-16MiB-handoff-grpc-unary/c1", "respcache-local-hit-16MiB-handoff-grpc-unary/c1")
	})
}

// inferUnaryWant calls ModelInfer and checks the answer's one output
// against want.
func inferUnaryWant(c inference.GRPCInferenceServiceClient, req *inference.ModelInferRequest, want []byte) Worker {
	return func(int) (Op, func(), error) {
		return func(full bool) error {
			resp, err := c.ModelInfer(context.Background(), req)
			if err != nil {
				return err
			}
			return checkInferResponse(resp, want, full)
		}, nil, nil
	}
}
