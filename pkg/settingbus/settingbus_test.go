package settingbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/settingbus"
	"github.com/nereid-io/nereid/pkg/tracesetting"
)

func startServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, s *server.Server) *bus.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := bus.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); nc.Close() })
	return c
}

type member struct {
	m *tracesetting.Manager
	f *settingbus.Follower
}

func follow(t *testing.T, s *server.Server, id string, role bus.Role, serve bool) member {
	t.Helper()
	m := tracesetting.New(tracesetting.DefaultConfig(), id)
	f, err := settingbus.Follow(context.Background(), connect(t, s), role, id, serve, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return member{m, f}
}

func TestSpreadReachesEveryRoleAndLateJoinersSync(t *testing.T) {
	s := startServer(t)
	gw1 := follow(t, s, "gw1", bus.RoleGateway, true)
	gw2 := follow(t, s, "gw2", bus.RoleGateway, true)
	ex := follow(t, s, "ex1", bus.RoleExecutor, false)
	rt := follow(t, s, "rt1", bus.RoleSequenceRouter, false)

	rate := uint32(7)
	snap, err := gw1.m.Update("simple", tracesetting.Update{Rate: &rate})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acked, err := settingbus.Spread(ctx, connect(t, s), bus.SettingsTrace, snap, []string{"gw1", "gw2", "ex1", "rt1"})
	if err != nil {
		t.Fatalf("spread: %v (acked %v)", err, acked)
	}
	if acked["ex1"] != string(bus.RoleExecutor) || acked["rt1"] != string(bus.RoleSequenceRouter) {
		t.Fatalf("acks %v", acked)
	}
	for name, mb := range map[string]member{"gw2": gw2, "ex1": ex, "rt1": rt} {
		if got := mb.m.Get("simple").Rate; got != 7 {
			t.Errorf("%s: simple's rate %d after the spread, want 7", name, got)
		}
		if got := mb.m.Get("").Rate; got != tracesetting.Defaults.Rate {
			t.Errorf("%s: global rate %d, want the default", name, got)
		}
	}
	// A process starting now gets the configuration from a gateway.
	late := follow(t, s, "ex2", bus.RoleExecutor, false)
	if got := late.m.Get("simple").Rate; got != 7 {
		t.Fatalf("late executor: simple's rate %d, want 7", got)
	}
	// An executor that never answers makes Spread say so.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := settingbus.Spread(ctx2, connect(t, s), bus.SettingsTrace, snap, []string{"ex1", "gone"}); err != settingbus.ErrIncomplete {
		t.Fatalf("spread with a missing executor: %v, want ErrIncomplete", err)
	}
}

func TestFollowWithoutGateway(t *testing.T) {
	s := startServer(t)
	ex := follow(t, s, "ex1", bus.RoleExecutor, false)
	if ex.m.Get("") != tracesetting.Defaults {
		t.Fatalf("settings without a gateway = %+v", ex.m.Get(""))
	}
}

// TestOneFollowEveryKind: the settings every service keeps name their kinds
// as the bus does, and one Follow keeps each kind in step on its own
// subjects: a logging change reaches the logging settings and leaves the
// trace settings alone.
func TestOneFollowEveryKind(t *testing.T) {
	trace := tracesetting.New(tracesetting.DefaultConfig(), "ex1")
	logs := logsetting.New(logsetting.Defaults, "ex1")
	for _, tc := range []struct {
		s    settingbus.Store
		want string
	}{{trace, bus.SettingsTrace}, {logs, bus.SettingsLogging}} {
		if got := tc.s.Kind(); got != tc.want {
			t.Errorf("%T.Kind() = %q, want %q", tc.s, got, tc.want)
		}
	}
	s := startServer(t)
	f, err := settingbus.Follow(context.Background(), connect(t, s), bus.RoleExecutor, "ex1", false, trace, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)

	origin := logsetting.New(logsetting.Defaults, "gw1")
	verbose := uint32(2)
	cfg := origin.Update(logsetting.Update{VerboseLevel: &verbose})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if acked, err := settingbus.Spread(ctx, connect(t, s), bus.SettingsLogging, cfg, []string{"ex1"}); err != nil {
		t.Fatalf("spread: %v (acked %v)", err, acked)
	}
	if got := logs.Get().VerboseLevel; got != 2 {
		t.Errorf("verbose level %d after the logging spread, want 2", got)
	}
	if got := trace.Get("").Rate; got != tracesetting.Defaults.Rate {
		t.Errorf("trace rate %d after a logging spread, want the default", got)
	}
}
