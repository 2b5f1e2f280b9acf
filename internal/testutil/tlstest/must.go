package tlstest

import "testing"

// Set is what most tests need: a CA, a server certificate for 127.0.0.1 and
// localhost, a client certificate, all written under dir.
type Set struct {
	CA                    *CA
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	Server, Client        *Leaf
	Dir                   string
}

// MustSet makes a Set in a temporary directory of t.
func MustSet(t testing.TB) *Set {
	t.Helper()
	s := &Set{Dir: t.TempDir()}
	var err error
	if s.CA, err = NewCA("nereid-test-ca"); err != nil {
		t.Fatal(err)
	}
	if s.CAFile, err = s.CA.WriteCA(s.Dir, "ca"); err != nil {
		t.Fatal(err)
	}
	s.Server = MustIssue(t, s.CA, Options{Kind: Server})
	if s.ServerCert, s.ServerKey, err = s.Server.Write(s.Dir, "server"); err != nil {
		t.Fatal(err)
	}
	s.Client = MustIssue(t, s.CA, Options{Kind: Client})
	if s.ClientCert, s.ClientKey, err = s.Client.Write(s.Dir, "client"); err != nil {
		t.Fatal(err)
	}
	return s
}

// MustIssue is CA.Issue failing t on error.
func MustIssue(t testing.TB, ca *CA, o Options) *Leaf {
	t.Helper()
	l, err := ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
