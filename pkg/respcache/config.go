package respcache

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is a cache implementation, by Triton's name for it.
type Kind string

// The implementations: Triton's local cache (in each gateway's memory)
// and its Redis cache (shared by every gateway).
const (
	KindLocal Kind = "local"
	KindRedis Kind = "redis"
)

// Defaults of the settings Triton leaves open or that are Nereid's own.
const (
	// DefaultPrefix starts every key the Redis cache writes.
	DefaultPrefix = "nereid:respcache:"
	// DefaultPendingBytes bounds the responses waiting to be stored:
	// beyond it, a response is not stored (nereid_response_cache_store_dropped).
	DefaultPendingBytes = 64 << 20
	// DefaultRedisTimeout is connect_timeout and socket_timeout when the
	// flags do not set them: Triton waits forever (0), which would let a
	// Redis that stopped answering hold requests until their deadline.
	DefaultRedisTimeout = time.Second
	// DefaultWaitTimeout is Triton's wait_timeout default.
	DefaultWaitTimeout = 100 * time.Millisecond
)

// Config is the response cache of a gateway, from tritonserver's
// --cache-config. The zero Config has no cache.
type Config struct {
	Kind Kind
	// Size is the local cache's size in bytes (local,size=).
	Size int64
	// Redis is the Redis cache's connection (redis,host=, port=, ...).
	Redis RedisConfig
	// TTL is how long an entry lives (ttl=, in seconds; Nereid's): 0, the
	// default, as long as the cache keeps it, as Triton's.
	TTL time.Duration
	// Prefix starts the Redis cache's keys (prefix=; Nereid's).
	Prefix string
	// PendingBytes bounds the responses waiting to be stored
	// (pending_size=; Nereid's). Default DefaultPendingBytes.
	PendingBytes int64
}

// RedisConfig is the Redis cache's connection, with the options of
// Triton's redis_cache (its README's table and redis_cache.cc).
type RedisConfig struct {
	Host string
	Port int
	// User is the ACL user (Triton's default "default"), Password its
	// password.
	User, Password string
	DB             int
	// ConnectTimeout, SocketTimeout: -1 waits forever (Triton's 0);
	// unset, DefaultRedisTimeout.
	ConnectTimeout, SocketTimeout time.Duration
	// PoolSize: the pooled connections; 0 lets the client choose (ten per
	// CPU). Triton's default is 1, which would serialize every lookup.
	PoolSize int
	// WaitTimeout is how long a lookup waits for a pooled connection.
	WaitTimeout time.Duration
	// TLS, on when any is set: a client certificate and key, the CA
	// verifying the server (a file or a directory of PEM files) and the
	// server name to ask for.
	Cert, Key, CACert, CACertDir, SNI string
}

// Enabled reports whether c configures a cache.
func (c Config) Enabled() bool { return c.Kind != "" }

// TLS reports whether the Redis connection uses TLS.
func (r RedisConfig) TLS() bool {
	return r.Cert != "" || r.Key != "" || r.CACert != "" || r.CACertDir != "" || r.SNI != ""
}

// errRedisAddress is Triton's message (redis_cache.cc) for a Redis cache
// without host or port.
var errRedisAddress = errors.New("Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' and 'port' in the configuration - e.g. tritonserver --cache-config redis,host=redis --cache-config redis,port=6379 --model-repository=/models ...")

// Flag is tritonserver's --cache-config <cache>,<key>=<value>, repeatable,
// the settings of one cache gathered across its uses (a flag.Value).
type Flag struct {
	settings map[string]map[string]string
	order    []string
}

// FlagUsage is the flag's help.
const FlagUsage = "response cache setting: <cache>,<key>=<value> (repeatable): local,size=<bytes>; redis,host=,port=,user=,password=,db=,connect_timeout=,socket_timeout=,pool_size=,wait_timeout= (ms),cert=,key=,cacert=,cacert_dir=,sni=; ttl=<seconds>, prefix= (redis), pending_size=<bytes>"

func (f *Flag) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	for _, name := range f.order {
		s := f.settings[name]
		for _, k := range slices.Sorted(maps.Keys(s)) {
			v := s[k]
			if k == "password" {
				v = "xxxxx"
			}
			parts = append(parts, name+","+k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// Set takes one <cache>,<key>=<value>.
func (f *Flag) Set(s string) error {
	name, kv, ok := strings.Cut(s, ",")
	if !ok || name == "" {
		return fmt.Errorf("--cache-config option format is '<cache name>,<setting>=<value>'. Got %s", s)
	}
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("--cache-config option format is '<cache name>,<setting>=<value>'. Got %s", s)
	}
	if f.settings == nil {
		f.settings = map[string]map[string]string{}
	}
	if f.settings[name] == nil {
		f.settings[name] = map[string]string{}
		f.order = append(f.order, name)
	}
	f.settings[name][k] = v
	return nil
}

// SetByteSize is the deprecated --response-cache-byte-size n, which Triton
// turns into --cache-config local,size=n.
func (f *Flag) SetByteSize(s string) error { return f.Set("local,size=" + s) }

// Config checks the settings and returns the cache they configure (the
// zero Config when there are none).
func (f *Flag) Config() (Config, error) {
	var c Config
	if f == nil || len(f.order) == 0 {
		return c, nil
	}
	if len(f.order) > 1 {
		return c, fmt.Errorf("--cache-config: one cache implementation at a time, got %s", strings.Join(f.order, " and "))
	}
	name := f.order[0]
	s := f.settings[name]
	p := parser{cache: name, s: s}
	c.TTL = time.Duration(p.int("ttl", 0)) * time.Second
	c.PendingBytes = int64(p.int("pending_size", DefaultPendingBytes))
	switch Kind(name) {
	case KindLocal:
		c.Kind = KindLocal
		if _, ok := s["size"]; !ok {
			return c, errors.New("--cache-config local: the local cache needs its size: local,size=<bytes>")
		}
		c.Size = int64(p.int("size", 0))
		p.known("size", "ttl", "pending_size")
	case KindRedis:
		c.Kind = KindRedis
		if s["host"] == "" || s["port"] == "" {
			return c, errRedisAddress
		}
		r := &c.Redis
		r.Host = s["host"]
		r.Port = p.int("port", 0)
		r.User, r.Password = s["user"], s["password"]
		r.DB = p.int("db", 0)
		r.ConnectTimeout = p.ms("connect_timeout")
		r.SocketTimeout = p.ms("socket_timeout")
		r.PoolSize = p.int("pool_size", 0)
		r.WaitTimeout = DefaultWaitTimeout
		if _, ok := s["wait_timeout"]; ok {
			r.WaitTimeout = time.Duration(p.int("wait_timeout", 0)) * time.Millisecond
		}
		r.Cert, r.Key, r.CACert, r.CACertDir, r.SNI = s["cert"], s["key"], s["cacert"], s["cacert_dir"], s["sni"]
		c.Prefix = DefaultPrefix
		if v, ok := s["prefix"]; ok {
			c.Prefix = v
		}
		p.known("host", "port", "user", "password", "db", "connect_timeout", "socket_timeout", "pool_size", "wait_timeout",
			"cert", "key", "cacert", "cacert_dir", "sni", "ttl", "prefix", "pending_size")
	default:
		return c, fmt.Errorf("--cache-config: unknown cache '%s': Nereid has the 'local' and 'redis' caches", name)
	}
	if p.err != nil {
		return Config{}, p.err
	}
	return c, nil
}

type parser struct {
	cache string
	s     map[string]string
	err   error
}

func (p *parser) int(key string, def int) int {
	v, ok := p.s[key]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		if p.err == nil {
			p.err = fmt.Errorf("--cache-config %s,%s=%s: not a non-negative integer", p.cache, key, v)
		}
		return def
	}
	return n
}

// ms is a timeout in milliseconds: 0 is forever (-1), unset the default.
func (p *parser) ms(key string) time.Duration {
	if _, ok := p.s[key]; !ok {
		return DefaultRedisTimeout
	}
	n := p.int(key, 0)
	if n == 0 {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}

func (p *parser) known(keys ...string) {
	for _, k := range slices.Sorted(maps.Keys(p.s)) {
		if !slices.Contains(keys, k) && p.err == nil {
			p.err = fmt.Errorf("--cache-config %s: unknown setting '%s'", p.cache, k)
		}
	}
}
