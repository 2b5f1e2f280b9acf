package respcache

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// redisStore keeps entries in Redis under
//
//	<prefix><len(model)>:<model>:<version>:<generation>:<key in hex>
//
// (the model's length makes the prefix of one model never the prefix of
// another), and the model's generation under <prefix>gen:<len>:<model>,
// which a reload increments: the entries of the generation before are
// then never read again and expire with their TTL (or are evicted by
// Redis's maxmemory policy).
type redisStore struct {
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
}

func newRedisStore(c Config) (*redisStore, error) {
	r := c.Redis
	opt := &redis.Options{
		Addr:         net.JoinHostPort(r.Host, strconv.Itoa(r.Port)),
		Username:     r.User,
		Password:     r.Password,
		DB:           r.DB,
		DialTimeout:  r.ConnectTimeout,
		ReadTimeout:  r.SocketTimeout,
		WriteTimeout: r.SocketTimeout,
		PoolSize:     r.PoolSize,
		PoolTimeout:  r.WaitTimeout,
		// A failed lookup is served uncached at once rather than retried:
		// the request must not wait for Redis.
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	}
	if opt.DialTimeout < 0 {
		opt.DialTimeout = 0 // go-redis: 0 is its default; Triton's 0 waits forever
	}
	if r.TLS() {
		tc, err := tlsConfig(r)
		if err != nil {
			return nil, err
		}
		opt.TLSConfig = tc
	}
	return &redisStore{rdb: redis.NewClient(opt), prefix: c.Prefix, ttl: c.TTL}, nil
}

func tlsConfig(r RedisConfig) (*tls.Config, error) {
	tc := &tls.Config{ServerName: r.Host, MinVersion: tls.VersionTLS12}
	if r.SNI != "" {
		tc.ServerName = r.SNI
	}
	if r.CACert != "" || r.CACertDir != "" {
		pool := x509.NewCertPool()
		files := []string{}
		if r.CACert != "" {
			files = append(files, r.CACert)
		}
		if r.CACertDir != "" {
			entries, err := os.ReadDir(r.CACertDir)
			if err != nil {
				return nil, fmt.Errorf("redis cache: cacert_dir: %w", err)
			}
			for _, e := range entries {
				if !e.IsDir() {
					files = append(files, filepath.Join(r.CACertDir, e.Name()))
				}
			}
		}
		for _, f := range files {
			pem, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("redis cache: cacert: %w", err)
			}
			pool.AppendCertsFromPEM(pem)
		}
		tc.RootCAs = pool
	}
	if (r.Cert == "") != (r.Key == "") {
		return nil, errors.New("redis cache: a client certificate needs its key and a key its certificate (cert=, key=)")
	}
	if r.Cert != "" {
		cert, err := tls.LoadX509KeyPair(r.Cert, r.Key)
		if err != nil {
			return nil, fmt.Errorf("redis cache: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func modelPart(model string) string { return strconv.Itoa(len(model)) + ":" + model }

func (s *redisStore) genKey(model string) string { return s.prefix + "gen:" + modelPart(model) }

// VersionPrefix is the prefix of every key of a model version.
func (s *redisStore) versionPrefix(model, version string) string {
	return s.prefix + modelPart(model) + ":" + version + ":"
}

// lookup reads the entry of k under the model's generation the caller
// believes current (gen) together with the generation Redis holds, in one
// MGET: a plain command, cheaper than a script, and as exact, as both keys
// are read at one instant. Only when the generation moved (a reload, seen
// here for the first time) does a second GET read the entry of the new
// one. cur is the generation the entry (or its absence) belongs to.
func (s *redisStore) lookup(ctx context.Context, model, version string, gen uint64, k Key) (value []byte, cur uint64, err error) {
	res, err := s.rdb.MGet(ctx, s.genKey(model), s.entryKey(model, version, gen, k)).Result()
	if err != nil {
		return nil, 0, err
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("%d values in the reply to a lookup, want 2", len(res))
	}
	cur = 0 // no generation key: the model was never reloaded (or Redis lost it)
	if g, ok := res[0].(string); ok {
		if cur, err = strconv.ParseUint(g, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("bad generation %q", g)
		}
	}
	if cur != gen {
		v, err := s.rdb.Get(ctx, s.entryKey(model, version, cur, k)).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return nil, cur, nil
		case err != nil:
			return nil, 0, err
		}
		return bytesOf(v), cur, nil
	}
	if v, ok := res[1].(string); ok {
		return bytesOf(v), cur, nil
	}
	return nil, cur, nil
}

// bytesOf is v's bytes without a copy: entries are never written to
// (WithID copies before it adds an id), so sharing the string's memory is
// safe, and a large entry is not copied once more on every hit.
func bytesOf(v string) []byte { return unsafe.Slice(unsafe.StringData(v), len(v)) }

func (s *redisStore) entryKey(model, version string, gen uint64, k Key) string {
	return s.versionPrefix(model, version) + strconv.FormatUint(gen, 10) + ":" + hex.EncodeToString(k[:])
}

func (s *redisStore) insert(ctx context.Context, model, version string, gen uint64, k Key, value []byte) error {
	return s.rdb.Set(ctx, s.entryKey(model, version, gen, k), value, s.ttl).Err()
}

// invalidate moves the model's generation on and returns the new one.
func (s *redisStore) invalidate(ctx context.Context, model string) (uint64, error) {
	g, err := s.rdb.Incr(ctx, s.genKey(model)).Result()
	return uint64(g), err
}
