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

// lookupScript reads a model's generation and the entry of that
// generation in one round trip: { generation, entry or nil }.
var lookupScript = redis.NewScript(`
local g = redis.call('GET', KEYS[1])
if not g then g = '0' end
return {g, redis.call('GET', ARGV[1] .. g .. ':' .. ARGV[2])}
`)

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

func (s *redisStore) lookup(ctx context.Context, model, version string, k Key) (value []byte, gen uint64, err error) {
	res, err := lookupScript.Run(ctx, s.rdb, []string{s.genKey(model)}, s.versionPrefix(model, version), hex.EncodeToString(k[:])).Slice()
	if err != nil {
		return nil, 0, err
	}
	if len(res) == 0 {
		return nil, 0, errors.New("empty reply to the lookup script")
	}
	gs, _ := res[0].(string)
	gen, err = strconv.ParseUint(gs, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("bad generation %q", gs)
	}
	if len(res) > 1 {
		if v, ok := res[1].(string); ok {
			return []byte(v), gen, nil
		}
	}
	return nil, gen, nil
}

func (s *redisStore) entryKey(model, version string, gen uint64, k Key) string {
	return s.versionPrefix(model, version) + strconv.FormatUint(gen, 10) + ":" + hex.EncodeToString(k[:])
}

func (s *redisStore) insert(ctx context.Context, model, version string, gen uint64, k Key, value []byte) error {
	return s.rdb.Set(ctx, s.entryKey(model, version, gen, k), value, s.ttl).Err()
}

func (s *redisStore) invalidate(ctx context.Context, model string) error {
	return s.rdb.Incr(ctx, s.genKey(model)).Err()
}
