package redisconn_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/internal/testutil/tlstest"
	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startSecured runs redis-server with TLS and the shipped ACL users.
func startSecured(t *testing.T) *redistest.Server {
	t.Helper()
	s := &redistest.Server{
		Port: freePort(t), Dir: t.TempDir(), TLS: tlstest.MustSet(t),
		Passwords:   map[string]string{"sequence-router": "router-pw-8c1d", "shm-registry": "registry-pw-77ae", "executor": "executor-pw-31f0"},
		ACLTemplate: "../../deploy/redis/users.acl.in",
	}
	cmd, err := s.Command()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := s.Wait(15 * time.Second); err != nil {
		t.Fatalf("redis-server: %v\n%s", err, out.String())
	}
	return s
}

func open(t *testing.T, url string, o redisconn.Options) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, err := redisconn.Open(ctx, url, o)
	if err == nil {
		rdb.Close()
	}
	return err
}

func TestSecuredRedis(t *testing.T) {
	s := startSecured(t)
	ctx := context.Background()

	// Each user reaches its own keys and commands, and nothing else.
	for _, c := range []struct {
		user, own, other string
	}{
		{"sequence-router", "nereid:seq:{m}:epoch", "{nereid:shm}regions"},
		{"shm-registry", "{nereid:shm}regions", "nereid:seq:{m}:epoch"},
		{"executor", "nereid:state:{m.1}:u:1", "nereid:seq:{m}:epoch"},
	} {
		t.Run(c.user, func(t *testing.T) {
			rdb, err := redisconn.Open(ctx, s.URL(), s.Options(c.user))
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			if err := rdb.Del(ctx, c.own).Err(); err != nil {
				t.Errorf("DEL own key: %v", err)
			}
			if err := rdb.Del(ctx, c.other).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Errorf("DEL the other service's key: %v, want NOPERM", err)
			}
			if err := rdb.Keys(ctx, "*").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Errorf("KEYS: %v, want NOPERM", err)
			}
			if err := rdb.FlushAll(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Errorf("FLUSHALL: %v, want NOPERM", err)
			}
		})
	}

	other, err := tlstest.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := other.WriteCA(t.TempDir(), "other")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		url  string
		o    redisconn.Options
		want []string
	}{
		{"wrong password", s.URL(), redisconn.Options{User: "sequence-router", Password: "not-the-password", CAFile: s.TLS.CAFile},
			[]string{"WRONGPASS", s.URL()}},
		{"password in the URL", strings.Replace(s.URL(), "rediss://", "rediss://sequence-router:url-secret-4411@", 1), redisconn.Options{CAFile: s.TLS.CAFile},
			[]string{"WRONGPASS", "xxxxx"}},
		{"no credentials", s.URL(), redisconn.Options{CAFile: s.TLS.CAFile}, []string{s.URL()}},
		{"untrusted server", s.URL(), redisconn.Options{User: "sequence-router", Password: "router-pw-8c1d", CAFile: otherCA},
			[]string{"certificate"}},
		{"TLS material for redis://", strings.Replace(s.URL(), "rediss", "redis", 1), s.Options("sequence-router"),
			[]string{"use rediss://"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := open(t, c.url, c.o)
			if err == nil {
				t.Fatal("connected")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			for _, secret := range []string{"router-pw-8c1d", "not-the-password", "url-secret-4411"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows a password: %v", err)
				}
			}
		})
	}
}

func TestRenderACL(t *testing.T) {
	got, err := redisconn.RenderACL("# comment\nuser a on >${A_PW} ~a:*\n\nuser default off\n", func(k string) string {
		return map[string]string{"A_PW": "s3cret"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "user a on >s3cret ~a:*\nuser default off\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := redisconn.RenderACL("user a on >${UNSET_PW}", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "UNSET_PW") {
		t.Fatalf("unset variable: %v", err)
	}
}
