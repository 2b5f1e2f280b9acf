// Package redistest runs a real redis-server for tests the way Nereid is
// deployed secured: TLS only (no plain port), the shipped ACL users
// (deploy/redis/users.acl.in) with passwords made for the test, data in a
// directory the caller chooses so that a restart keeps it.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nereid-io/nereid/internal/testutil/tlstest"
	"github.com/nereid-io/nereid/pkg/redisconn"
)

// Users of the shipped ACL file.
var Users = []string{"sequence-router", "shm-registry", "executor"}

// Inspector is a read-only user tests add to the shipped ones (its password
// in Server.Passwords), to look at every key: SCAN for what is left behind,
// which no service's user may run.
const Inspector = "inspector"

// Server describes a secured redis-server to start (and restart).
type Server struct {
	Port int
	Dir  string
	// TLS holds the CA and the server certificate.
	TLS *tlstest.Set
	// Passwords by ACL user.
	Passwords map[string]string
	// ACLTemplate is the path of the ACL template to render.
	ACLTemplate string
}

// URL is the rediss:// URL of the server (no credentials in it).
func (s *Server) URL() string { return fmt.Sprintf("rediss://127.0.0.1:%d/0", s.Port) }

// Options are the client options of user.
func (s *Server) Options(user string) redisconn.Options {
	return redisconn.Options{User: user, Password: s.Passwords[user], CAFile: s.TLS.CAFile}
}

// Args renders the ACL file into Dir and returns redis-server's arguments.
func (s *Server) Args() ([]string, error) {
	tmpl, err := os.ReadFile(s.ACLTemplate)
	if err != nil {
		return nil, err
	}
	acl, err := redisconn.RenderACL(string(tmpl), func(name string) string {
		for _, u := range Users {
			if redisconn.PasswordEnv(u) == name {
				return s.Passwords[u]
			}
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	if pw := s.Passwords[Inspector]; pw != "" {
		acl += "user " + Inspector + " on >" + pw + " ~* resetchannels -@all +ping +hello +auth +select +scan +type +ttl +pttl +exists +get +hgetall +hmget +zrange +smembers\n"
	}
	aclFile := filepath.Join(s.Dir, "users.acl")
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		return nil, err
	}
	return []string{
		"--port", "0", "--tls-port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--tls-cert-file", s.TLS.ServerCert, "--tls-key-file", s.TLS.ServerKey,
		"--tls-ca-cert-file", s.TLS.CAFile, "--tls-auth-clients", "optional",
		"--aclfile", aclFile,
		"--dir", s.Dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
	}, nil
}

// Command is the redis-server command for s.
func (s *Server) Command() (*exec.Cmd, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (make deps installs it): %w", err)
	}
	args, err := s.Args()
	if err != nil {
		return nil, err
	}
	return exec.Command(path, args...), nil
}

// Wait waits until user can reach the server over TLS.
func (s *Server) Wait(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rdb, err := redisconn.Open(ctx, s.URL(), s.Options(Users[0]))
	if err != nil {
		return err
	}
	return rdb.Close()
}
