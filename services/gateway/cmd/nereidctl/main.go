// Command nereidctl prints what runs in a Nereid constellation and drains
// executors, through a gateway's cluster admin API (--admin-port).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/services/gateway/internal/admincli"
)

func main() {
	fs := flag.NewFlagSet("nereidctl", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), admincli.Usage)
		fmt.Fprintln(fs.Output(), "\nflags:")
		fs.PrintDefaults()
	}
	var f admincli.Flags
	f.Register(fs, os.Getenv)
	_ = fs.Parse(os.Args[1:])
	if err := run(f, fs.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "nereidctl:", err)
		os.Exit(1)
	}
}

func run(f admincli.Flags, args []string) error {
	creds, err := credentialsFor(f)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(f.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	timeout := f.Timeout
	if timeout == 0 && (len(args) == 0 || args[0] != "drain") {
		timeout = 30 * time.Second
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	k, v, err := f.Metadata()
	if err != nil {
		return err
	}
	if k != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	return admincli.Run(ctx, adminv1.NewAdminClient(conn), args, os.Getenv("NEREID_EXECUTOR_ID"), os.Stdout)
}

func credentialsFor(f admincli.Flags) (credentials.TransportCredentials, error) {
	if !f.TLS {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("--ca: no certificate in " + f.CA)
		}
	}
	if f.Cert != "" || f.Key != "" {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return credentials.NewTLS(cfg), nil
}
