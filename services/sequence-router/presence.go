package seqrouter

import (
	"os"
	"slices"
	"strings"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

// announce publishes the router's presence for the admin API: the models
// whose lease it holds, with what their batchers hold
// (bus.RouterPresenceSubject, every bus.HeartbeatInterval; withdraw on
// shutdown).
func (s *Service) announce(withdraw bool) {
	node, _ := os.Hostname()
	p := &adminv1.SequenceRouter{Id: s.cfg.ID, Node: node, StartedUnixMs: s.started.UnixMilli(), Withdraw: withdraw}
	if !withdraw {
		for _, m := range s.allModels() {
			p.Models = append(p.Models, m.usage())
		}
		slices.SortFunc(p.Models, func(a, b *adminv1.RouterModel) int {
			if c := strings.Compare(a.Name, b.Name); c != 0 {
				return c
			}
			return strings.Compare(a.Version, b.Version)
		})
	}
	if err := s.bus.Publish(bus.RouterPresenceSubject, p); err != nil {
		s.log.Debug("presence not published", "err", err)
	}
}
