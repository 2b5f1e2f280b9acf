package respcache

import (
	"strings"
	"testing"
	"time"
)

func TestFlag(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want Config
		err  string
	}{
		{name: "none"},
		{name: "local", args: []string{"local,size=1048576"}, want: Config{Kind: KindLocal, Size: 1048576, PendingBytes: DefaultPendingBytes}},
		{name: "local with ttl", args: []string{"local,size=100", "local,ttl=30"}, want: Config{Kind: KindLocal, Size: 100, TTL: 30 * time.Second, PendingBytes: DefaultPendingBytes}},
		{name: "local needs size", args: []string{"local,ttl=3"}, err: "needs its size"},
		{name: "redis minimal", args: []string{"redis,host=redis", "redis,port=6379"}, want: Config{Kind: KindRedis, Prefix: DefaultPrefix, PendingBytes: DefaultPendingBytes,
			Redis: RedisConfig{Host: "redis", Port: 6379, ConnectTimeout: DefaultRedisTimeout, SocketTimeout: DefaultRedisTimeout, WaitTimeout: DefaultWaitTimeout}}},
		{name: "redis every option", args: []string{"redis,host=h", "redis,port=1", "redis,user=u", "redis,password=p", "redis,db=2",
			"redis,connect_timeout=0", "redis,socket_timeout=50", "redis,pool_size=4", "redis,wait_timeout=7", "redis,cert=c", "redis,key=k",
			"redis,cacert=ca", "redis,cacert_dir=d", "redis,sni=s", "redis,ttl=60", "redis,prefix=p:", "redis,pending_size=10"},
			want: Config{Kind: KindRedis, Prefix: "p:", TTL: time.Minute, PendingBytes: 10, Redis: RedisConfig{Host: "h", Port: 1, User: "u", Password: "p", DB: 2,
				ConnectTimeout: -1, SocketTimeout: 50 * time.Millisecond, PoolSize: 4, WaitTimeout: 7 * time.Millisecond,
				Cert: "c", Key: "k", CACert: "ca", CACertDir: "d", SNI: "s"}}},
		{name: "redis without port: Triton's message", args: []string{"redis,host=redis"}, err: "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' and 'port'"},
		{name: "unknown setting", args: []string{"local,size=1", "local,colour=red"}, err: "unknown setting 'colour'"},
		{name: "unknown cache", args: []string{"memcached,size=1"}, err: "unknown cache 'memcached'"},
		{name: "two caches", args: []string{"local,size=1", "redis,host=h"}, err: "one cache implementation at a time"},
		{name: "bad number", args: []string{"local,size=lots"}, err: "not a non-negative integer"},
		{name: "bad format", args: []string{"local"}, err: "option format"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f Flag
			var err error
			for _, a := range tc.args {
				if err = f.Set(a); err != nil {
					break
				}
			}
			var got Config
			if err == nil {
				got, err = f.Config()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	var f Flag
	if err := f.SetByteSize("4096"); err != nil {
		t.Fatal(err)
	}
	if c, _ := f.Config(); c.Kind != KindLocal || c.Size != 4096 {
		t.Errorf("--response-cache-byte-size: %+v", c)
	}
	_ = f.Set("redis,password=secret")
	if strings.Contains(f.String(), "secret") {
		t.Error("String shows the password")
	}
}
