package seqrouter

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/internal/testutil/leakcheck"
	"github.com/nereid-io/nereid/pkg/bus"
)

func TestStartsAndAnswersPing(t *testing.T) {
	leakcheck.Check(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	s, err := New(Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	msg, err := nc.Request(bus.PingSubject(Name), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	if string(msg.Data) != Name {
		t.Fatalf("ping answered %q, want %q", msg.Data, Name)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a connection succeeded")
	}
}
