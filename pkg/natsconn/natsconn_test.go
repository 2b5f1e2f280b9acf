package natsconn

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func TestConnectWaitsForServer(t *testing.T) {
	// Reserve a port by starting and stopping a server, then start the
	// client first: Connect must keep retrying until the server appears.
	probe, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go probe.Start()
	if !probe.ReadyForConnections(5 * time.Second) {
		t.Fatal("probe server not ready")
	}
	port := probe.Addr().(interface{ String() string }).String()
	probe.Shutdown()
	probe.WaitForShutdown()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		nc, err := Connect(ctx, "nats://"+port, "test", nil)
		if err == nil {
			nc.Close()
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	srvOpts := &server.Options{Host: "127.0.0.1", NoLog: true, NoSigs: true}
	_, p, _ := splitHostPort(port)
	srvOpts.Port = p
	s, err := server.NewServer(srvOpts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	defer s.Shutdown()
	if err := <-done; err != nil {
		t.Fatalf("Connect: %v", err)
	}
}

func TestConnectGivesUpWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Connect(ctx, "nats://127.0.0.1:1", "test", nil); err == nil {
		t.Fatal("Connect to a closed port succeeded")
	}
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	return h, n, err
}
