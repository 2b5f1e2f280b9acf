package constellation

import (
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/bus"
)

// WatchInFlight follows the liveness traffic of the requests the gateways
// of c wait for, by request (bus.ProbeID of its reply subject): their
// probes, as an executor hears them, and the executors' word that they hold
// them, as the gateways' inboxes receive it. The count it returns is of the
// requests known to be held by an executor: each has been probed by its
// gateway or heard of unasked from its executor, as requests held through a
// whole sweep are. A test waits for it before killing an executor, to know
// what was in flight on it.
func (c *Cluster) WatchInFlight() (count func() int) {
	c.t.Helper()
	probed := map[string]bool{}
	var mu sync.Mutex
	obs := c.ConnectAs(bus.RoleExecutor)
	if _, err := obs.Subscribe(bus.AliveSubject, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		for data := m.Data; len(data) >= len(bus.ProbeID("")); data = data[len(bus.ProbeID("")):] {
			probed[string(data[:len(bus.ProbeID(""))])] = true
		}
	}); err != nil {
		c.t.Fatal(err)
	}
	inboxes := c.ConnectAs(bus.RoleGateway)
	if _, err := inboxes.Subscribe(bus.InboxPrefix(bus.RoleGateway)+".>", func(m *nats.Msg) {
		if m.Header.Get(bus.HeaderAlive) != "" {
			mu.Lock()
			defer mu.Unlock()
			id := bus.ProbeID(m.Subject)
			probed[string(id[:])] = true
		}
	}); err != nil {
		c.t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{obs, inboxes} {
		if err := nc.Flush(); err != nil {
			c.t.Fatal(err)
		}
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(probed)
	}
}
