package natsconn

import (
	"context"
	"crypto/tls"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/nereid-io/nereid/internal/testutil/tlstest"
	"github.com/nereid-io/nereid/pkg/bus"
)

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func connectWith(t *testing.T, url string, a Auth) error {
	t.Helper()
	opts, err := a.Options(bus.RoleGateway)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	nc, err := Connect(ctx, url, "test", nil, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	if got := nc.NewInbox(); !strings.HasPrefix(got, "_INBOX.gateway.") {
		t.Errorf("inbox %q is not under the role's prefix", got)
	}
	return nil
}

func TestAuthKinds(t *testing.T) {
	seed, pub := func() ([]byte, string) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		s, _ := kp.Seed()
		p, _ := kp.PublicKey()
		return s, p
	}()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	userSrv := startServer(t, &server.Options{Users: []*server.User{{Username: "gateway", Password: "pw-1a2b"}}})
	tokenSrv := startServer(t, &server.Options{Authorization: "tok-9z8y"})
	nkeySrv := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})

	for _, c := range []struct {
		name    string
		url     string
		a       Auth
		wantErr string
	}{
		{"user and password", userSrv.ClientURL(), Auth{User: "gateway", Password: "pw-1a2b"}, ""},
		{"wrong password", userSrv.ClientURL(), Auth{User: "gateway", Password: "not-it-77"}, "authorization violation"},
		{"password in the URL", strings.Replace(userSrv.ClientURL(), "nats://", "nats://gateway:url-pw-55@", 1), Auth{}, "authorization violation"},
		{"no credentials", userSrv.ClientURL(), Auth{}, "authorization violation"},
		{"token", tokenSrv.ClientURL(), Auth{Token: "tok-9z8y"}, ""},
		{"NKey seed", nkeySrv.ClientURL(), Auth{NKeySeedFile: seedFile}, ""},
		{"two kinds at once", userSrv.ClientURL(), Auth{User: "gateway", Password: "pw-1a2b", Token: "tok-9z8y"}, "give one of"},
		{"password without user", userSrv.ClientURL(), Auth{Password: "pw-1a2b"}, "needs a password"},
		{"missing seed file", nkeySrv.ClientURL(), Auth{NKeySeedFile: seedFile + ".nope"}, "user.nk.nope"},
		{"missing creds file", userSrv.ClientURL(), Auth{CredsFile: seedFile + ".creds"}, "credentials file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := connectWith(t, c.url, c.a)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatal(err)
			case c.wantErr != "" && (err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.wantErr))):
				t.Fatalf("got %v, want an error containing %q", err, c.wantErr)
			}
			if err != nil {
				for _, s := range []string{"pw-1a2b", "not-it-77", "url-pw-55", "tok-9z8y"} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error shows a secret: %v", err)
					}
				}
			}
		})
	}
}

func TestTLS(t *testing.T) {
	set := tlstest.MustSet(t)
	kp, err := set.Server.TLS()
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, &server.Options{
		TLS: true, TLSVerify: true, TLSTimeout: 5,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{kp}, ClientCAs: set.CA.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
	})
	url := strings.Replace(srv.ClientURL(), "nats://", "tls://", 1)
	if err := connectWith(t, url, Auth{CAFile: set.CAFile, CertFile: set.ClientCert, KeyFile: set.ClientKey}); err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	ctxErr := func(a Auth) error {
		opts, err := a.Options(bus.RoleGateway)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		nc, err := Connect(ctx, url, "test", nil, opts...)
		if err == nil {
			nc.Close()
		}
		return err
	}
	if err := ctxErr(Auth{CAFile: set.CAFile}); err == nil {
		t.Error("connected without the client certificate the server requires")
	}
	if err := ctxErr(Auth{CertFile: set.ClientCert, KeyFile: set.ClientKey}); err == nil {
		t.Error("connected without trusting the server's CA")
	}
	if _, err := (Auth{CertFile: set.ClientCert}).Options(bus.RoleGateway); err == nil {
		t.Error("a certificate without its key was accepted")
	}
}

func TestFlagsAndEnv(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var a Auth
	a.Register(fs)
	var help strings.Builder
	fs.SetOutput(&help)
	if err := fs.Parse([]string{"--nats-user", "flaguser", "--nats-password", "flag-secret-31"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvUser, "envuser")
	t.Setenv(EnvToken, "env-token-8")
	a.FromEnv()
	if a.User != "flaguser" || a.Password != "flag-secret-31" || a.Token != "env-token-8" {
		t.Errorf("flags then environment: %+v", a)
	}
	fs.PrintDefaults()
	if strings.Contains(help.String(), "flag-secret-31") || strings.Contains(help.String(), "env-token-8") {
		t.Error("-h shows a secret")
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://u:secret@h:4222":             "nats://u:xxxxx@h:4222",
		"nats://token@h:4222,nats://h2:4222": "nats://xxxxx@h:4222,nats://h2:4222",
		"nats://h:4222":                      "nats://h:4222",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCredsFile connects with a .creds file (decentralised auth: an
// operator, an account and a user JWT signed down the chain).
func TestCredsFile(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	ujwt, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	useed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(t.TempDir(), "gateway.creds")
	if err := os.WriteFile(credsFile, creds, 0o600); err != nil {
		t.Fatal(err)
	}

	operator, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{operator}, AccountResolver: resolver})

	if err := connectWith(t, srv.ClientURL(), Auth{CredsFile: credsFile}); err != nil {
		t.Fatalf(".creds: %v", err)
	}
	// Another user's seed with this JWT is refused.
	other, _ := nkeys.CreateUser()
	oseed, _ := other.Seed()
	bad, _ := jwt.FormatUserConfig(ujwt, oseed)
	badFile := filepath.Join(t.TempDir(), "bad.creds")
	if err := os.WriteFile(badFile, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := connectWith(t, srv.ClientURL(), Auth{CredsFile: badFile}); err == nil {
		t.Fatal("a .creds file whose seed does not match its JWT was accepted")
	}
}
