package constellation

import (
	"crypto/rand"
	"encoding/hex"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/internal/testutil/tlstest"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/natsconn"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

// Every cluster runs NATS with the shipped least-privilege configuration
// (deploy/docker/nats.conf): each service connects as its role with a
// password made for this test process, passed in the environment as a
// deployment would. The passwords, and any other secret a test registers,
// must never appear in a process's output: Start checks that at cleanup.

var (
	secretsMu sync.Mutex
	secrets   []string
	rolePW    map[bus.Role]string
)

func randomSecret(prefix string) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b)
}

// Secret registers s as a secret no process may print.
func Secret(s string) string {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	secrets = append(secrets, s)
	return s
}

// NewSecret makes a random secret and registers it.
func NewSecret(prefix string) string { return Secret(randomSecret(prefix)) }

// leakedSecrets returns the registered secrets found in out.
func leakedSecrets(out string) []string {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	var found []string
	for _, s := range secrets {
		if strings.Contains(out, s) {
			found = append(found, s[:4]+"…")
		}
	}
	return found
}

// RolePassword is the NATS password of role in this test process.
func RolePassword(r bus.Role) string {
	secretsMu.Lock()
	if rolePW == nil {
		rolePW = map[bus.Role]string{}
		for _, role := range bus.Roles() {
			pw := randomSecret("nats-" + string(role) + "-")
			rolePW[role] = pw
			secrets = append(secrets, pw)
		}
	}
	pw := rolePW[r]
	secretsMu.Unlock()
	return pw
}

// roleOf names the role of a service binary, "" for other programs.
func roleOf(path string) bus.Role {
	switch filepath.Base(path) {
	case "nereid-gateway":
		return bus.RoleGateway
	case "nereid-executor":
		return bus.RoleExecutor
	case "nereid-sequence-router":
		return bus.RoleSequenceRouter
	case "nereid-shm-registry":
		return bus.RoleShmRegistry
	}
	return ""
}

var (
	redisTLSOnce sync.Once
	redisTLS     *tlstest.Set
	redisTLSErr  error
)

// redisServer describes a secured redis-server of this test process: one
// CA and server certificate, one password per ACL user.
func redisServer(t testing.TB, port int, dir string) *redistest.Server {
	t.Helper()
	redisTLSOnce.Do(func() { redisTLS, redisTLSErr = makeRedisTLS() })
	if redisTLSErr != nil {
		t.Fatal(redisTLSErr)
	}
	pw := map[string]string{}
	for _, u := range append(redistest.Users, redistest.Inspector) {
		pw[u] = redisPassword(u)
	}
	return &redistest.Server{Port: port, Dir: dir, TLS: redisTLS, Passwords: pw, ACLTemplate: RepoPath(t, "deploy/redis/users.acl.in")}
}

func makeRedisTLS() (*tlstest.Set, error) {
	dir, err := os.MkdirTemp("", "nereid-e2e-redis-tls-")
	if err != nil {
		return nil, err
	}
	s := &tlstest.Set{Dir: dir}
	if s.CA, err = tlstest.NewCA("nereid-e2e-redis"); err != nil {
		return nil, err
	}
	if s.CAFile, err = s.CA.WriteCA(dir, "ca"); err != nil {
		return nil, err
	}
	if s.Server, err = s.CA.Issue(tlstest.Options{Kind: tlstest.Server}); err != nil {
		return nil, err
	}
	if s.ServerCert, s.ServerKey, err = s.Server.Write(dir, "redis"); err != nil {
		return nil, err
	}
	return s, nil
}

var redisPW = map[string]string{}

// redisPassword is the Redis ACL password of user in this test process.
func redisPassword(user string) string {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	if redisPW[user] == "" {
		redisPW[user] = randomSecret("redis-" + user + "-")
		secrets = append(secrets, redisPW[user])
	}
	return redisPW[user]
}

// processEnv is the environment of a process started from path: services
// get their role's NATS credentials, nats-server every role's password.
func processEnv(path string) []string {
	env := os.Environ()
	if r := roleOf(path); r != "" {
		env = append(env, natsconn.EnvUser+"="+string(r), natsconn.EnvPassword+"="+RolePassword(r))
		if r == bus.RoleSequenceRouter || r == bus.RoleShmRegistry || r == bus.RoleExecutor {
			redisTLSOnce.Do(func() { redisTLS, redisTLSErr = makeRedisTLS() })
			if redisTLSErr == nil {
				env = append(env, redisconn.EnvUser+"="+string(r), redisconn.EnvPassword+"="+redisPassword(string(r)),
					redisconn.EnvCA+"="+redisTLS.CAFile)
			}
		}
		return env
	}
	if filepath.Base(path) == "nats-server" {
		for _, r := range bus.Roles() {
			env = append(env, bus.PasswordEnv(r)+"="+RolePassword(r))
		}
	}
	return env
}

// ConnectAs connects to url as role, with the role's inbox prefix, as the
// services do; tests use it to look at the bus with a role's rights.
func ConnectAs(t testing.TB, url string, r bus.Role) *nats.Conn {
	t.Helper()
	opts, err := natsconn.Auth{User: string(r), Password: RolePassword(r)}.Options(r)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to nats as %s: %v", r, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// RedisCLI runs redis-cli against the secured Redis at url (StartRedis) as
// ACL user, over TLS; the password travels in REDISCLI_AUTH, never on the
// command line. It returns the trimmed output.
func RedisCLI(t testing.TB, url, user string, args ...string) (string, error) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		return "", err
	}
	redisTLSOnce.Do(func() { redisTLS, redisTLSErr = makeRedisTLS() })
	if redisTLSErr != nil {
		return "", redisTLSErr
	}
	cmd := exec.Command("redis-cli", append([]string{"--tls", "--cacert", redisTLS.CAFile, "--user", user,
		"-h", u.Hostname(), "-p", u.Port()}, args...)...)
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+redisPassword(user))
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
