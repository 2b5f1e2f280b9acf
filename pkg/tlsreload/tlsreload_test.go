package tlsreload

import (
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/internal/testutil/tlstest"
)

func served(t *testing.T, r *Reloader, set *tlstest.Set) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	kp, err := set.Client.TLS()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: set.CA.Pool(), Certificates: []tls.Certificate{kp}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestReload(t *testing.T) {
	set := tlstest.MustSet(t)
	r, err := New(Files{Cert: set.ServerCert, Key: set.ServerKey, CA: set.CAFile, Mutual: true},
		WithCheckInterval(0), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if got := served(t, r, set); got != set.Server.Serial.String() {
		t.Fatalf("serial %s, want %s", got, set.Server.Serial)
	}
	next := tlstest.MustIssue(t, set.CA, tlstest.Options{Kind: tlstest.Server})
	// Half a rotation (new certificate, old key) is not taken.
	if err := tlstest.WriteFile(set.ServerCert, next.CertPEM); err != nil {
		t.Fatal(err)
	}
	if got := served(t, r, set); got != set.Server.Serial.String() {
		t.Fatalf("mismatched pair taken: serial %s", got)
	}
	if err := tlstest.WriteFile(set.ServerKey, next.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if got := served(t, r, set); got != next.Serial.String() {
		t.Fatalf("after rotation serial %s, want %s", got, next.Serial)
	}
}

func TestNewErrors(t *testing.T) {
	set := tlstest.MustSet(t)
	for _, c := range []struct {
		name string
		f    Files
		want string
	}{
		{"no key", Files{Cert: set.ServerCert}, "certificate and its key are required"},
		{"mutual without CA", Files{Cert: set.ServerCert, Key: set.ServerKey, Mutual: true}, "root certificate"},
		{"missing file", Files{Cert: set.Dir + "/nope.crt", Key: set.ServerKey}, "nope.crt"},
		{"key of another cert", Files{Cert: set.ServerCert, Key: set.ClientKey}, "server.crt"},
		{"CA not PEM", Files{Cert: set.ServerCert, Key: set.ServerKey, CA: set.ServerKey}, "no PEM certificate"},
	} {
		_, err := New(c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
