// Package settingbus keeps run-time settings (Triton's trace and logging
// extensions) the same in every service of the constellation. The gateway
// asked to change a kind of settings publishes the whole new configuration
// on bus.SettingsSubject(kind) and waits for the acknowledgements
// (Spread); every gateway, executor and sequence router applies what it
// receives and acknowledges (Follow); a process starting up asks a
// gateway for the current configuration on bus.SettingsSyncSubject(kind),
// so that it does not run on its startup defaults after a change.
package settingbus

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
)

// Store is one kind of settings as a process holds them: every service
// keeps its run-time settings (pkg/tracesetting's and pkg/logsetting's
// Manager) behind it, and follows them all with one Follow.
type Store interface {
	// Kind names the settings: bus.SettingsTrace, bus.SettingsLogging.
	Kind() string
	// Current returns the configuration to hand to a starting process.
	Current() proto.Message
	// ApplyBytes decodes a published configuration and applies it if it
	// is newer than the one held.
	ApplyBytes(data []byte) error
}

// SyncTimeout bounds the question a starting process asks a gateway.
const SyncTimeout = 2 * time.Second

// Follower keeps a Store in step; Stop ends it.
type Follower struct {
	subs []*bus.Subscription
}

// Follow keeps each of stores in step with its kind's configurations on
// bc, acknowledging each as role id. It first asks a gateway for the
// current configuration (none answering is normal: the first process, or
// no change made yet). With serve, the process also answers that question
// for others (gateways).
func Follow(ctx context.Context, bc *bus.Conn, role bus.Role, id string, serve bool, stores ...Store) (*Follower, error) {
	f := &Follower{}
	for _, s := range stores {
		if err := f.follow(ctx, bc, s, role, id, serve); err != nil {
			f.Stop()
			return nil, err
		}
	}
	return f, nil
}

// follow subscribes s to its kind's configurations.
func (f *Follower) follow(ctx context.Context, bc *bus.Conn, s Store, role bus.Role, id string, serve bool) error {
	kind := s.Kind()
	sub, err := bc.Handle(bus.SettingsSubject(kind), "", func(_ context.Context, req []byte) (proto.Message, error) {
		if err := s.ApplyBytes(req); err != nil {
			return nil, err
		}
		return &busv1.SettingsAck{Id: id, Role: string(role)}, nil
	})
	if err != nil {
		return err
	}
	f.subs = append(f.subs, sub)
	sctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	body, err := bc.RequestBytes(sctx, bus.SettingsSyncSubject(kind), mustMarshal(&busv1.SettingsAck{Id: id, Role: string(role)}))
	cancel()
	if err == nil {
		_ = s.ApplyBytes(body) // a bad answer leaves the defaults, as no answer does
	}
	if serve {
		sub, err := bc.Handle(bus.SettingsSyncSubject(kind), bus.QueueGateways, func(context.Context, []byte) (proto.Message, error) {
			return s.Current(), nil
		})
		if err != nil {
			return err
		}
		f.subs = append(f.subs, sub)
	}
	return nil
}

// Stop unsubscribes.
func (f *Follower) Stop() {
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
	f.subs = nil
}

func mustMarshal(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return b
}

// ErrIncomplete is returned by Spread when some of the processes it waited
// for did not acknowledge in time.
var ErrIncomplete = errors.New("settingbus: not every process acknowledged")

// Spread publishes a configuration of kind and collects the
// acknowledgements until every id in want has answered or ctx ends. It
// returns the ids that acknowledged, and ErrIncomplete if some of want
// did not.
func Spread(ctx context.Context, bc *bus.Conn, kind string, cfg proto.Message, want []string) (map[string]string, error) {
	pending := make(map[string]bool, len(want))
	for _, id := range want {
		pending[id] = true
	}
	acked := map[string]string{}
	err := bc.Gather(ctx, bus.SettingsSubject(kind), cfg, func(data []byte) bool {
		var ack busv1.SettingsAck
		if proto.Unmarshal(data, &ack) != nil {
			return true
		}
		acked[ack.GetId()] = ack.GetRole()
		delete(pending, ack.GetId())
		return len(pending) > 0
	})
	if err != nil {
		return acked, err
	}
	if len(pending) > 0 {
		return acked, ErrIncomplete
	}
	return acked, nil
}
