package gateway

import (
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/respcache"
)

// redisServer runs a private redis-server for the test; kill ends it
// early. Without redis-server the test is skipped.
type redisServer struct {
	port int
	cmd  *exec.Cmd
	once sync.Once
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (make deps installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisServer{port: port, cmd: cmd}
	t.Cleanup(r.kill)
	waitFor(t, "redis-server", 10*time.Second, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return r
}

func (r *redisServer) kill() {
	r.once.Do(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
}

func redisCache(r *redisServer, ttl time.Duration) func(*Config) {
	return func(c *Config) {
		var f respcache.Flag
		for _, s := range []string{"redis,host=127.0.0.1", "redis,port=" + strconv.Itoa(r.port), "redis,ttl=" + strconv.Itoa(int(ttl/time.Second))} {
			_ = f.Set(s)
		}
		c.ResponseCache, _ = f.Config()
	}
}

// redisStored waits until the gateway's cache has written n responses.
func redisStored(t testing.TB, g *Gateway, model string, n uint64) {
	t.Helper()
	s := g.cache.Stats(model, "1")
	waitFor(t, "stored responses", 5*time.Second, func() bool {
		return s.Misses.Load() >= n && g.cache.Pending() == 0
	})
}

// TestResponseCacheRedisShared: two gateways share the Redis cache: what
// one stored the other answers; entries expire by their TTL; a reload
// through either makes them unreachable for both.
func TestResponseCacheRedisShared(t *testing.T) {
	rs := startRedis(t)
	ns, g1, base := cacheSetup(t, redisCache(rs, 2*time.Second))
	g2 := startGateway(t, ns, redisCache(rs, 2*time.Second))
	waitModelReady(t, g2, "ident")
	body := inferJSON("ident", "INT32", []int{4}, []int{9, 8, 7, 6}, "")
	infer := func(g *Gateway) {
		t.Helper()
		if r := post(t, "http://"+g.HTTPAddr()+"/v2/models/ident/infer", body); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	infer(g1)
	redisStored(t, g1, "ident", 1)
	infer(g2)
	if n := executions(t, base, "ident"); n != 1 {
		t.Fatalf("execution_count %d: the second gateway did not answer from Redis", n)
	}
	if h := g2.cache.Stats("ident", "1").Hits.Load(); h != 1 {
		t.Fatalf("hits at the second gateway: %d", h)
	}

	// TTL: after it, the request runs again.
	time.Sleep(2100 * time.Millisecond)
	infer(g2)
	if n := executions(t, base, "ident"); n != 2 {
		t.Fatalf("execution_count %d: the entry outlived its TTL", n)
	}
	redisStored(t, g2, "ident", 1)
	infer(g1)
	if n := executions(t, base, "ident"); n != 2 {
		t.Fatalf("execution_count %d: not stored again", n)
	}

	// A reload through g1: neither gateway answers from before it.
	if r := post(t, base+"/v2/repository/models/ident/load", ""); r.status != 200 {
		t.Fatalf("reload: %d %s", r.status, r.body)
	}
	before := executions(t, base, "ident")
	infer(g2)
	if n := executions(t, base, "ident"); n != before+1 {
		t.Fatalf("execution_count %d, want %d: answered from before the reload", n, before+1)
	}
}

// TestResponseCacheRedisKilled: Redis killed under load fails no request;
// the errors are counted in nereid_response_cache_errors.
func TestResponseCacheRedisKilled(t *testing.T) {
	rs := startRedis(t)
	_, g, base := cacheSetup(t, redisCache(rs, 0))
	url := base + "/v2/models/ident/infer"
	var (
		failed, done atomic.Int64
		stop         = make(chan struct{})
		wg           sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := post(t, url, inferJSON("ident", "INT32", []int{4}, []int{w, i % 8, 0, 0}, ""))
				if r.status != 200 {
					failed.Add(1)
					t.Errorf("request failed: %d %s", r.status, r.body)
				}
				done.Add(1)
			}
		})
	}
	waitFor(t, "requests", 10*time.Second, func() bool { return done.Load() > 50 })
	rs.kill()
	at := done.Load()
	waitFor(t, "requests without Redis", 20*time.Second, func() bool { return done.Load() > at+100 })
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	if v := metricValue(t, "http://"+g.MetricsAddr()+"/metrics", `nereid_response_cache_errors{op="lookup"}`); v < 1 {
		t.Fatalf("nereid_response_cache_errors{op=\"lookup\"} = %v", v)
	}
}
