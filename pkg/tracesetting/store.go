package tracesetting

import (
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Kind implements settingbus.Store: the trace settings (bus.SettingsTrace).
func (m *Manager) Kind() string { return "trace" }

// Current implements settingbus.Store: the configuration held.
func (m *Manager) Current() proto.Message { return m.Snapshot() }

// ApplyBytes implements settingbus.Store: it decodes a published
// busv1.TraceSettings and applies it if newer.
func (m *Manager) ApplyBytes(data []byte) error {
	var s busv1.TraceSettings
	if err := proto.Unmarshal(data, &s); err != nil {
		return tritonerr.InvalidArgf("bad trace settings: %v", err)
	}
	m.Apply(&s)
	return nil
}
