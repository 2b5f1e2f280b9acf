// Package redisconn opens the Redis connections of the services that keep
// state there (sequence-router, shm-registry): redis:// or rediss:// URLs,
// an ACL user and password, a CA for the server's certificate and an
// optional client certificate, each by flag or environment variable. Errors
// name the URL without its password.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/tritonflag"
)

// Options are the credentials and TLS material for a Redis URL. User and
// Password override those in the URL, so that the URL can be written
// without a secret.
type Options struct {
	User, Password string
	// CAFile verifies the server's certificate (rediss://); CertFile and
	// KeyFile are a client certificate for servers that ask for one.
	CAFile, CertFile, KeyFile string
}

// Environment variables FromEnv reads.
const (
	EnvUser     = "NEREID_REDIS_USER"
	EnvPassword = "NEREID_REDIS_PASSWORD"
	EnvCA       = "NEREID_REDIS_CA"
	EnvCert     = "NEREID_REDIS_CERT"
	EnvKey      = "NEREID_REDIS_KEY"
)

// Register defines --redis-user, --redis-password, --redis-ca, --redis-cert
// and --redis-key on fs.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.User, "redis-user", "", "Redis ACL user (env "+EnvUser+")")
	tritonflag.SecretVar(fs, &o.Password, "redis-password", "Redis password (env "+EnvPassword+", preferred)")
	fs.StringVar(&o.CAFile, "redis-ca", "", "CA certificate verifying the Redis server, for rediss:// URLs (env "+EnvCA+")")
	fs.StringVar(&o.CertFile, "redis-cert", "", "client certificate for Redis TLS (env "+EnvCert+")")
	fs.StringVar(&o.KeyFile, "redis-key", "", "client key for Redis TLS (env "+EnvKey+")")
}

// FromEnv fills the fields still empty from the environment.
func (o *Options) FromEnv() {
	tritonflag.EnvDefaults(map[string]*string{
		EnvUser: &o.User, EnvPassword: &o.Password, EnvCA: &o.CAFile, EnvCert: &o.CertFile, EnvKey: &o.KeyFile,
	})
}

// Redact returns rawURL with its password hidden.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable Redis URL)"
	}
	return u.Redacted()
}

// clientOptions turns the URL and o into go-redis options.
func clientOptions(rawURL string, o Options) (*redis.Options, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		// go-redis quotes the URL in some errors; never repeat it.
		msg := strings.ReplaceAll(err.Error(), rawURL, Redact(rawURL))
		return nil, fmt.Errorf("redis url %s: %s", Redact(rawURL), msg)
	}
	if o.User != "" {
		opt.Username = o.User
	}
	if o.Password != "" {
		opt.Password = o.Password
	}
	if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		return opt, nil
	}
	if opt.TLSConfig == nil {
		return nil, fmt.Errorf("redis url %s: TLS material given for a redis:// URL; use rediss://", Redact(rawURL))
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis CA %s: no PEM certificate in it", o.CAFile)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("redis: a client certificate needs its key and a key its certificate (--redis-cert, --redis-key)")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis client certificate: %w", err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return opt, nil
}

// New returns a client for rawURL without contacting Redis: it connects on
// first use (for a service that must start while Redis is away).
func New(rawURL string, o Options) (*redis.Client, error) {
	opt, err := clientOptions(rawURL, o)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// Open connects to rawURL and waits, until ctx ends, for Redis to answer, so
// that a service started alongside Redis does not fail on the first try.
// Refused credentials and certificates fail at once: they do not get better
// with retries.
func Open(ctx context.Context, rawURL string, o Options) (*redis.Client, error) {
	opt, err := clientOptions(rawURL, o)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	for {
		err = rdb.Ping(ctx).Err()
		if err == nil {
			return rdb, nil
		}
		if permanent(err) {
			rdb.Close()
			return nil, fmt.Errorf("redis %s: %w", Redact(rawURL), err)
		}
		select {
		case <-ctx.Done():
			rdb.Close()
			return nil, fmt.Errorf("redis %s: %w", Redact(rawURL), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// permanent reports errors that retrying will not fix: authentication,
// ACL and certificate errors.
func permanent(err error) bool {
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "invalid username-password", "certificate"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
