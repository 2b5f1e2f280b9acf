package gateway

import (
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nereid-io/nereid/pkg/fdlimit"
)

// Idle connections cost a descriptor each. A crowd of them (21,000
// against a limit of 20,000) would leave none for a new client: accept
// fails and the server waits for one to close, so new clients wait on old
// idle ones. When the descriptors open near the limit (Limits.ShedIdleAt,
// 90% of the soft RLIMIT_NOFILE by default), the oldest idle connections
// are closed to make room: HTTP keep-alive connections between requests,
// gRPC connections with no call open. Their clients reconnect on their
// next request, as after --http-idle-timeout or
// --grpc-max-connection-idle.

// shedMargin is the fraction of the threshold shed below it at once, so
// that one shedding makes room for many new connections, not one.
const shedMargin = 20 // 1/20: 5%

// shedIdle picks the idle connections to close when open descriptors
// reach threshold: the oldest (by idleSince, when each became idle), as
// many as bring open below the threshold by the margin, or all there are.
// It answers their indices, oldest first; none below the threshold or
// with threshold <= 0.
func shedIdle(open, threshold int, idleSince []time.Time) []int {
	if threshold <= 0 || open < threshold || len(idleSince) == 0 {
		return nil
	}
	want := min(open-(threshold-max(1, threshold/shedMargin)), len(idleSince))
	order := make([]int, len(idleSince))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return idleSince[a].Compare(idleSince[b]) })
	return order[:want]
}

// resampleEvery is how often the open descriptors are counted anew
// (fdlimit.Open lists them all); between counts they are estimated from
// the connections opened and closed since.
const resampleEvery = time.Second

// connShedder follows the HTTP server's connections (http.Server.ConnState)
// and the gRPC server's (rateConn: idle while no call is open), and sheds
// idle ones near the descriptor limit.
type connShedder struct {
	threshold int
	log       *slog.Logger
	closed    *prometheus.CounterVec // nereid_connections_closed
	count     func() (int, error)    // the descriptors open: fdlimit.Open

	mu    sync.Mutex
	conns map[net.Conn]*connEntry
	// sampled descriptors were open at sampledAt, when the servers had
	// sampledConns connections.
	sampled, sampledConns int
	sampledAt             time.Time
	warned                time.Time // when there was last nothing to shed
}

type connEntry struct {
	grpc      bool
	idle      bool
	idleSince time.Time
}

// newConnShedder returns nil when shedding is off (threshold < 0) or the
// descriptors cannot be counted.
func newConnShedder(threshold int, log *slog.Logger, closed *prometheus.CounterVec) *connShedder {
	if threshold < 0 {
		return nil
	}
	if _, err := fdlimit.Open(); err != nil {
		log.Warn("open descriptors cannot be counted: idle connections are not shed near the limit", "err", err)
		return nil
	}
	if threshold == 0 {
		l, err := fdlimit.Get()
		if err != nil || l.Soft == 0 || l.Soft > 1<<31 {
			return nil // no limit worth the name
		}
		threshold = int(l.Soft / 10 * 9)
	}
	return &connShedder{threshold: threshold, log: log, closed: closed, count: fdlimit.Open, conns: map[net.Conn]*connEntry{}}
}

// connState is the HTTP server's ConnState hook.
func (s *connShedder) connState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		s.add(c, false)
	case http.StateActive:
		s.setIdle(c, false)
	case http.StateIdle:
		s.setIdle(c, true)
	case http.StateHijacked, http.StateClosed:
		s.remove(c)
	}
}

// add counts a new connection, idle from the start for gRPC (a client
// may connect ahead of its calls; it is the newest idle one), and sheds
// idle ones if that brings the descriptors to the threshold.
func (s *connShedder) add(c net.Conn, grpc bool) {
	now := time.Now()
	s.mu.Lock()
	s.conns[c] = &connEntry{grpc: grpc, idle: grpc, idleSince: now}
	shed := s.shedNear(now)
	s.mu.Unlock()
	for _, c := range shed {
		_ = c.Close()
	}
}

func (s *connShedder) setIdle(c net.Conn, idle bool) {
	now := time.Now()
	s.mu.Lock()
	if e := s.conns[c]; e != nil {
		e.idle, e.idleSince = idle, now
	}
	s.mu.Unlock()
}

func (s *connShedder) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// shedNear picks the idle connections to close when the descriptors open
// reach the threshold, and counts them out; s.mu is held. The caller
// closes them once s.mu is released (a gRPC connection's Close comes back
// to remove).
func (s *connShedder) shedNear(now time.Time) []net.Conn {
	if now.Sub(s.sampledAt) >= resampleEvery {
		if n, err := s.count(); err == nil {
			s.sampled, s.sampledConns, s.sampledAt = n, len(s.conns), now
		}
	}
	open := s.sampled + len(s.conns) - s.sampledConns
	if open < s.threshold {
		return nil
	}
	var idle []net.Conn
	var since []time.Time
	for c, e := range s.conns {
		if e.idle {
			idle = append(idle, c)
			since = append(since, e.idleSince)
		}
	}
	pick := shedIdle(open, s.threshold, since)
	shed := make([]net.Conn, 0, len(pick))
	var n [2]int // HTTP, gRPC
	for _, i := range pick {
		c := idle[i]
		if s.conns[c].grpc {
			n[1]++
		} else {
			n[0]++
		}
		delete(s.conns, c) // its descriptor is free: out of the count now
		shed = append(shed, c)
	}
	s.closed.WithLabelValues("http", "fd_limit").Add(float64(n[0]))
	s.closed.WithLabelValues("grpc", "fd_limit").Add(float64(n[1]))
	switch {
	case len(pick) > 0:
		s.log.Warn("open descriptors near the limit: closed the oldest idle connections",
			"open", open, "threshold", s.threshold, "http", n[0], "grpc", n[1])
	case now.Sub(s.warned) >= resampleEvery:
		s.warned = now
		s.log.Warn("open descriptors near the limit, and no idle connection to close", "open", open, "threshold", s.threshold)
	}
	return shed
}

// closedConns is nereid_connections_closed: connections the gateway closed
// to protect itself, by protocol and reason.
func closedConns() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nereid_connections_closed",
		Help: "Client connections the gateway closed to protect itself, by protocol (http, grpc) and reason: fd_limit (idle, shed as open descriptors neared the limit), min_rate (a request body or gRPC message below its minimum rate)",
	}, []string{"protocol", "reason"})
}

// connGuard is what the gateway keeps to protect its connections.
type connGuard struct {
	closed  *prometheus.CounterVec // nereid_connections_closed
	shedder *connShedder           // nil: no shedding
}

// guardConns sets up g.conns, before the servers are made.
func (g *Gateway) guardConns() {
	g.conns.closed = closedConns()
	// Every series from the start, so the family is always on the page.
	for _, p := range []string{"http", "grpc"} {
		for _, r := range []string{"fd_limit", "min_rate"} {
			g.conns.closed.WithLabelValues(p, r)
		}
	}
	g.metrics.MustRegister(g.conns.closed)
	if g.cfg.HTTPAddr != "" || g.cfg.GRPCAddr != "" {
		g.conns.shedder = newConnShedder(g.cfg.Limits.ShedIdleAt, g.log, g.conns.closed)
		if s := g.conns.shedder; s != nil {
			g.log.Info("idle connections are shed near the descriptor limit", "open_descriptors", s.threshold)
		}
	}
}

// httpConnState is the HTTP server's ConnState hook; nil without shedding.
func (c *connGuard) httpConnState() func(net.Conn, http.ConnState) {
	if c.shedder == nil {
		return nil
	}
	return c.shedder.connState
}
