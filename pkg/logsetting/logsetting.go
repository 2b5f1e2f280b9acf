// Package logsetting holds Triton's logging extension settings (log_file,
// log_info, log_warning, log_error, log_verbose_level, log_format) as every
// Nereid service applies them, and the log/slog handler that obeys them at
// run time: which levels are written, in which format (Triton's default
// or ISO8601 line formats, or JSON), with the trace and span ids of the
// request a line is about.
//
// A change is made through one gateway (Manager.Update) and spread to the
// constellation as busv1.LogSettings on bus.SettingsSubject("logging")
// (pkg/settingbus); each process applies the newest version.
package logsetting

import (
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Format is a log line format.
type Format string

// Formats: Triton's two, and JSON lines.
const (
	FormatDefault Format = "default"
	FormatISO8601 Format = "ISO8601"
	FormatJSON    Format = "json"
)

// ParseFormat reads a format name.
func ParseFormat(s string) (Format, bool) {
	switch Format(s) {
	case FormatDefault, FormatISO8601, FormatJSON:
		return Format(s), true
	}
	return "", false
}

// Values are the effective settings.
type Values struct {
	File                 string // read-only at run time
	Info, Warning, Error bool
	VerboseLevel         uint32
	Format               Format
}

// Defaults are tritonserver's: info, warnings and errors on, verbose off,
// default format, standard error.
var Defaults = Values{Info: true, Warning: true, Error: true, Format: FormatDefault}

// Update is a change as a client asks for it; nil fields stay.
type Update struct {
	Info, Warning, Error *bool
	VerboseLevel         *uint32
	Format               *Format
}

// Manager holds a process's logging settings.
type Manager struct {
	start Values
	id    string

	mu   sync.Mutex
	snap *busv1.LogSettings
	cur  atomic.Pointer[Values]
}

// New returns a Manager starting from start (the flags); id names the
// process in the versions it makes.
func New(start Values, id string) *Manager {
	if start.Format == "" {
		start.Format = FormatDefault
	}
	m := &Manager{start: start, id: id, snap: &busv1.LogSettings{}}
	v := start
	m.cur.Store(&v)
	return m
}

// SetID names the process once it knows its id.
func (m *Manager) SetID(id string) {
	m.mu.Lock()
	m.id = id
	m.mu.Unlock()
}

// Get returns the effective settings.
func (m *Manager) Get() Values { return *m.cur.Load() }

func (m *Manager) resolve(s *busv1.LogSettings) Values {
	v := m.start
	if s.Info != nil {
		v.Info = s.GetInfo()
	}
	if s.Warning != nil {
		v.Warning = s.GetWarning()
	}
	if s.Error != nil {
		v.Error = s.GetError()
	}
	if s.VerboseLevel != nil {
		v.VerboseLevel = s.GetVerboseLevel()
	}
	if s.Format != nil {
		if f, ok := ParseFormat(s.GetFormat()); ok {
			v.Format = f
		}
	}
	return v
}

// Update applies u here and returns the configuration to publish.
func (m *Manager) Update(u Update) *busv1.LogSettings {
	m.mu.Lock()
	defer m.mu.Unlock()
	next := proto.Clone(m.snap).(*busv1.LogSettings)
	if u.Info != nil {
		next.Info = proto.Bool(*u.Info)
	}
	if u.Warning != nil {
		next.Warning = proto.Bool(*u.Warning)
	}
	if u.Error != nil {
		next.Error = proto.Bool(*u.Error)
	}
	if u.VerboseLevel != nil {
		next.VerboseLevel = proto.Uint32(*u.VerboseLevel)
	}
	if u.Format != nil {
		next.Format = proto.String(string(*u.Format))
	}
	next.Version = m.snap.GetVersion() + 1
	next.Origin = m.id
	m.install(next)
	return proto.Clone(next).(*busv1.LogSettings)
}

func (m *Manager) install(s *busv1.LogSettings) {
	m.snap = s
	v := m.resolve(s)
	m.cur.Store(&v)
}

// Apply takes s if it is newer than what is held.
func (m *Manager) Apply(s *busv1.LogSettings) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.GetVersion() < m.snap.GetVersion() || (s.GetVersion() == m.snap.GetVersion() && s.GetOrigin() <= m.snap.GetOrigin()) {
		return false
	}
	m.install(proto.Clone(s).(*busv1.LogSettings))
	return true
}

// Kind implements settingbus.Store: the logging settings
// (bus.SettingsLogging).
func (m *Manager) Kind() string { return "logging" }

// Current implements settingbus.Store.
func (m *Manager) Current() proto.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return proto.Clone(m.snap)
}

// ApplyBytes implements settingbus.Store.
func (m *Manager) ApplyBytes(data []byte) error {
	var s busv1.LogSettings
	if err := proto.Unmarshal(data, &s); err != nil {
		return tritonerr.InvalidArgf("bad log settings: %v", err)
	}
	m.Apply(&s)
	return nil
}

var errLogFile = tritonerr.Unsupportedf("log file location can not be updated through network protocol")

// Param is one setting of a request: a JSON value (HTTP) or a gRPC
// LogSettingsRequest parameter, reduced to what it holds.
type Param struct {
	Null   bool
	Bool   *bool
	Uint   *uint64 // a JSON number that is a non-negative integer, or uint32_param
	String *string
}

// Parse reads a request's settings. grpc selects the gRPC handler's
// messages, which differ from the HTTP ones in places.
func Parse(params map[string]Param, grpc bool) (Update, error) {
	var u Update
	if p, ok := params["log_file"]; ok && (grpc || !p.Null) {
		return u, errLogFile
	}
	for _, name := range []string{"log_info", "log_warning", "log_error"} {
		p, ok := params[name]
		if !ok || (p.Null && !grpc) {
			continue
		}
		if p.Bool == nil {
			return u, tritonerr.InvalidArgf("expect boolean for '%s'", name)
		}
		switch name {
		case "log_info":
			u.Info = p.Bool
		case "log_warning":
			u.Warning = p.Bool
		case "log_error":
			u.Error = p.Bool
		}
	}
	if p, ok := params["log_verbose_level"]; ok && (grpc || !p.Null) {
		if p.Uint == nil || *p.Uint > 1<<31-1 {
			if grpc {
				return u, tritonerr.InvalidArgf("expect int32 for 'log_verbose_level'")
			}
			return u, tritonerr.InvalidArgf("expect unsigned integer for 'log_verbose_level'")
		}
		v := uint32(*p.Uint)
		u.VerboseLevel = &v
	}
	if p, ok := params["log_format"]; ok && (grpc || !p.Null) {
		if p.String == nil {
			return u, tritonerr.InvalidArgf("expect string for 'log_format'")
		}
		f, ok := ParseFormat(*p.String)
		if !ok {
			if grpc {
				return u, tritonerr.InvalidArgf("invalid argument for log_format, got: %s", *p.String)
			}
			return u, tritonerr.Unavailablef("invalid argument for --log_format, got: %s", *p.String)
		}
		u.Format = &f
	}
	return u, nil
}
