package respcache

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

func encodedResponse(t *testing.T, id string) []byte {
	b, err := proto.Marshal(&inference.ModelInferResponse{ModelName: "m", ModelVersion: "1", Id: id,
		Outputs: []*inference.ModelInferResponse_InferOutputTensor{{Name: "O", Datatype: "INT32", Shape: []int64{1}}}, RawOutputContents: [][]byte{{7, 0, 0, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exercise runs what every store must do: a miss, then after the store a
// hit with the request's own id, another request missing, and after an
// invalidation of the model a miss again.
func exercise(t *testing.T, c *Cache) {
	ctx := context.Background()
	req := baseRequest()
	l := c.Lookup(ctx, req, "1")
	if l.Hit || !l.store {
		t.Fatalf("first lookup: hit %v store %v", l.Hit, l.store)
	}
	c.Store(&l, encodedResponse(t, req.Id), true)
	c.Flush(ctx)
	req2 := baseRequest()
	req2.Id = "another"
	l = c.Lookup(ctx, req2, "1")
	if !l.Hit {
		t.Fatal("second lookup missed")
	}
	var got inference.ModelInferResponse
	if err := proto.Unmarshal(WithID(l.Entry, req2.Id), &got); err != nil || got.Id != "another" || got.RawOutputContents[0][0] != 7 {
		t.Fatalf("hit: %v %v", &got, err)
	}
	if l := c.Lookup(ctx, req, "2"); l.Hit {
		t.Fatal("another version hit")
	}
	c.Invalidate(ctx, "m")
	if l := c.Lookup(ctx, req, "1"); l.Hit {
		t.Fatal("hit after invalidation")
	}
	s := c.Stats("m", "1")
	if s.Misses.Load() != 1 || s.MissNs.Load() == 0 {
		t.Errorf("misses %d in %d ns", s.Misses.Load(), s.MissNs.Load())
	}
}

func TestLocalCache(t *testing.T) {
	c, err := New(Config{Kind: KindLocal, Size: 1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, c)
}

func TestLocalCachePendingBound(t *testing.T) {
	c, _ := New(Config{Kind: KindLocal, Size: 1 << 20, PendingBytes: 2 * Cost(100)}, nil)
	for range 3 {
		l := c.Lookup(context.Background(), baseRequest(), "1")
		c.Store(&l, make([]byte, 100), false)
	}
	if d := c.Counts().Dropped.Load(); d != 1 {
		t.Fatalf("dropped %d, want 1 (two fit)", d)
	}
}

func redisCache(t *testing.T, ttl time.Duration) (*Cache, *redistestAddr) {
	rdb := redistest.Plain(t)
	host, port, _ := net.SplitHostPort(rdb.Options().Addr)
	p, _ := strconv.Atoi(port)
	var f Flag
	for _, s := range []string{"redis,host=" + host, "redis,port=" + port, "redis,ttl=" + strconv.Itoa(int(ttl/time.Second))} {
		if err := f.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, &redistestAddr{host, p}
}

type redistestAddr struct {
	host string
	port int
}

func TestRedisCache(t *testing.T) {
	c, _ := redisCache(t, 0)
	exercise(t, c)
}

func TestRedisCacheSharedAndTTL(t *testing.T) {
	a, addr := redisCache(t, time.Second)
	b, err := New(Config{Kind: KindRedis, Prefix: DefaultPrefix, TTL: time.Second, Redis: RedisConfig{Host: addr.host, Port: addr.port, WaitTimeout: time.Second}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	l := a.Lookup(ctx, baseRequest(), "1")
	a.Store(&l, encodedResponse(t, ""), true)
	a.Flush(ctx)
	if l := b.Lookup(ctx, baseRequest(), "1"); !l.Hit {
		t.Fatal("the other cache missed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Lookup(ctx, baseRequest(), "1").Hit {
		if time.Now().After(deadline) {
			t.Fatal("entry outlived its TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRedisDownServesUncached(t *testing.T) {
	// A port nobody listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c, err := New(Config{Kind: KindRedis, Prefix: DefaultPrefix, Redis: RedisConfig{Host: "127.0.0.1", Port: port, ConnectTimeout: time.Second, SocketTimeout: time.Second, WaitTimeout: time.Second}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := c.Lookup(context.Background(), baseRequest(), "1")
	if l.Hit || l.store {
		t.Fatalf("hit %v store %v with Redis down", l.Hit, l.store)
	}
	if c.Counts().LookupErrors.Load() != 1 {
		t.Fatalf("lookup errors %d", c.Counts().LookupErrors.Load())
	}
	if l := c.Lookup(context.Background(), baseRequest(), "1"); l.Hit || c.Counts().Bypassed.Load() != 1 {
		t.Fatalf("during the backoff: bypassed %d", c.Counts().Bypassed.Load())
	}
}

// commandCalls is how many times Redis ran each command since the last
// CONFIG RESETSTAT (INFO commandstats).
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	return calls
}

// A Redis lookup is one plain MGET (no script) of the model's generation
// and the entry of the generation last seen, and a generation another
// cache moved on is seen at once: the stale entry is never answered, the
// new generation's is.
func TestRedisLookupOneMGet(t *testing.T) {
	a, addr := redisCache(t, 0)
	b, err := New(Config{Kind: KindRedis, Prefix: DefaultPrefix, Redis: RedisConfig{Host: addr.host, Port: addr.port, WaitTimeout: time.Second}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(addr.host, strconv.Itoa(addr.port))})
	defer rdb.Close()
	ctx := context.Background()
	store := func(c *Cache, value byte) {
		t.Helper()
		l := c.Lookup(ctx, baseRequest(), "1")
		if l.Hit {
			t.Fatal("hit before the store")
		}
		resp := encodedResponse(t, "")
		resp[len(resp)-4] = value // the raw output's first byte
		c.Store(&l, resp, true)
		c.Flush(ctx)
	}
	hit := func(c *Cache) (byte, bool) {
		t.Helper()
		l := c.Lookup(ctx, baseRequest(), "1")
		if !l.Hit {
			return 0, false
		}
		var got inference.ModelInferResponse
		if err := proto.Unmarshal(l.Entry, &got); err != nil {
			t.Fatal(err)
		}
		return got.RawOutputContents[0][0], true
	}

	store(a, 7)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, ok := hit(b); !ok || v != 7 {
			t.Fatalf("the other cache: hit %v, value %d", ok, v)
		}
	}
	calls := commandCalls(t, rdb)
	if calls["mget"] != 3 || calls["evalsha"]+calls["eval"]+calls["get"] != 0 {
		t.Errorf("three hits ran %v, want 3 MGET and nothing else", calls)
	}

	a.Invalidate(ctx, "m") // a reload elsewhere: b's generation is stale
	if _, ok := hit(b); ok {
		t.Fatal("hit of the generation before the reload")
	}
	store(a, 9)
	if v, ok := hit(b); !ok || v != 9 {
		t.Fatalf("after the reload: hit %v, value %d, want the new entry", ok, v)
	}
}
