package tracesetting

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Level is a set of Triton's trace levels; 0 is OFF.
type Level uint32

// Triton's trace levels.
const (
	LevelOff        Level = 0
	LevelTimestamps Level = 1
	LevelTensors    Level = 2
)

// Strings is the level as Triton reports it: ["OFF"] or the levels set.
func (l Level) Strings() []string {
	if l == LevelOff {
		return []string{"OFF"}
	}
	var out []string
	if l&LevelTimestamps != 0 {
		out = append(out, "TIMESTAMPS")
	}
	if l&LevelTensors != 0 {
		out = append(out, "TENSORS")
	}
	return out
}

// Mode is a trace mode of --trace-config.
type Mode string

// Trace modes: Triton's own, JSON trace files written by the gateway that
// received the request (pkg/tritontrace), and OpenTelemetry spans exported
// by every service a request crosses (pkg/tracing).
const (
	ModeTriton        Mode = "triton"
	ModeOpenTelemetry Mode = "opentelemetry"
)

// MinCount is the smallest trace_count: -1, no limit.
const MinCount = -1

// Values is one effective trace setting.
type Values struct {
	Level        Level
	Rate         uint32
	Count        int32
	LogFrequency uint32
}

// Defaults are Triton's: tracing off, one trace every 1000 requests, no
// limit on the number of traces, traces written at shutdown.
var Defaults = Values{Level: LevelOff, Rate: 1000, Count: -1, LogFrequency: 0}

// invalidReason says why a setting that is not OFF cannot trace, or "":
// Triton's reasons, a trace file missing in triton mode among them.
func (v Values) invalidReason(cfg *Config) string {
	if v.Rate == 0 {
		return "sample rate must be non-zero"
	}
	if cfg.Mode == ModeTriton && cfg.File == "" {
		return "trace file name is not given"
	}
	return ""
}

// Update is a change of one scope as a client asks for it: nil fields stay
// as they are, Clear fields go back to their fallback.
type Update struct {
	Level                                           *Level
	Rate                                            *uint32
	Count                                           *int32
	LogFrequency                                    *uint32
	ClearLevel, ClearRate, ClearCount, ClearLogFreq bool
}

// Empty reports whether u changes nothing.
func (u Update) Empty() bool {
	return u.Level == nil && u.Rate == nil && u.Count == nil && u.LogFrequency == nil &&
		!u.ClearLevel && !u.ClearRate && !u.ClearCount && !u.ClearLogFreq
}

// Config is what --trace-config sets at startup.
type Config struct {
	Mode Mode
	// Defaults are the global setting's fallback.
	Defaults Values
	// Options are the mode's own settings (opentelemetry url, resource,
	// bsp_*), reported by the trace setting endpoints as given.
	Options map[string]string
	// File is triton mode's trace file (--trace-config triton,file=...),
	// fixed at start as in Triton.
	File string
}

// DefaultConfig is the configuration without --trace-config.
func DefaultConfig() Config { return Config{Mode: ModeOpenTelemetry, Defaults: Defaults} }

// Sampler is one effective setting and its counters: the global setting
// or a model's, as it stands between two changes (a change replaces it, as
// Triton replaces a TraceSetting). Traces written to a file are grouped by
// the Sampler they were sampled under (pkg/tritontrace).
type Sampler struct {
	v      Values
	valid  bool
	seen   atomic.Uint64 // requests counted against the rate
	remain atomic.Int64  // traces still allowed; meaningless when v.Count < 0
}

func newSampler(v Values, cfg *Config) *Sampler {
	s := &Sampler{v: v, valid: v.invalidReason(cfg) == ""}
	s.remain.Store(int64(v.Count))
	return s
}

// Values is the setting.
func (s *Sampler) Values() Values { return s.v }

// Remaining is trace_count as Triton reports it: the traces this setting
// may still start (-1: no limit).
func (s *Sampler) Remaining() int32 {
	if s.v.Count < 0 {
		return s.v.Count
	}
	return int32(max(s.remain.Load(), 0))
}

// Sample reports whether the request just counted starts a trace: the
// level is not OFF, the request is the rate-th since the last sampled
// one, and trace_count allows. It does not allocate.
func (s *Sampler) Sample() bool { return s.sample() }

func (s *Sampler) sample() bool {
	if s.v.Level == LevelOff || !s.valid {
		return false
	}
	if s.v.Count == 0 {
		return false
	}
	if s.seen.Add(1)%uint64(s.v.Rate) != 0 {
		return false
	}
	if s.v.Count < 0 {
		return true
	}
	for {
		n := s.remain.Load()
		if n <= 0 {
			return false
		}
		if s.remain.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// table is the effective settings of one version, read without locks.
type table struct {
	global *Sampler
	models map[string]*Sampler
}

func (t *table) lookup(model string) *Sampler {
	if s, ok := t.models[model]; ok {
		return s
	}
	return t.global
}

// Manager holds a process's trace settings.
type Manager struct {
	cfg Config
	id  string

	mu   sync.Mutex
	snap *busv1.TraceSettings
	tab  atomic.Pointer[table]
	// changed is closed and replaced whenever a version is applied.
	changed chan struct{}
}

// New returns a Manager with cfg's defaults; id names this process in the
// versions it makes.
func New(cfg Config, id string) *Manager {
	if cfg.Mode == "" {
		cfg.Mode = ModeOpenTelemetry
	}
	m := &Manager{cfg: cfg, id: id, snap: &busv1.TraceSettings{Global: &busv1.TraceSettingValues{}}, changed: make(chan struct{})}
	m.tab.Store(m.build(m.snap))
	return m
}

// Config returns the startup configuration.
func (m *Manager) Config() Config { return m.cfg }

func resolve(sv *busv1.TraceSettingValues, fb Values) Values {
	if sv == nil {
		return fb
	}
	if sv.Level != nil {
		fb.Level = Level(sv.GetLevel())
	}
	if sv.Rate != nil {
		fb.Rate = sv.GetRate()
	}
	if sv.Count != nil {
		fb.Count = sv.GetCount()
	}
	if sv.LogFrequency != nil {
		fb.LogFrequency = sv.GetLogFrequency()
	}
	return fb
}

func (m *Manager) build(s *busv1.TraceSettings) *table {
	g := resolve(s.GetGlobal(), m.cfg.Defaults)
	t := &table{global: newSampler(g, &m.cfg), models: make(map[string]*Sampler, len(s.GetModels()))}
	for name, sv := range s.GetModels() {
		t.models[name] = newSampler(resolve(sv, g), &m.cfg)
	}
	return t
}

// Sample reports whether a request for model starts a trace: the
// setting's level is not OFF and the request is the rate-th since the last
// sampled one, while trace_count allows. It does not allocate.
func (m *Manager) Sample(model string) bool { return m.tab.Load().lookup(model).sample() }

// Sampler returns model's effective setting ("" for the global one) with
// its counters.
func (m *Manager) Sampler(model string) *Sampler { return m.tab.Load().lookup(model) }

// Active reports whether s is still one of the effective settings (no
// change replaced it).
func (m *Manager) Active(s *Sampler) bool {
	t := m.tab.Load()
	if t.global == s {
		return true
	}
	for _, ms := range t.models {
		if ms == s {
			return true
		}
	}
	return false
}

// Level is model's effective trace level.
func (m *Manager) Level(model string) Level { return m.tab.Load().lookup(model).v.Level }

// Get returns model's effective setting ("" for the global one).
func (m *Manager) Get(model string) Values { return m.tab.Load().lookup(model).v }

// Snapshot returns a copy of the current configuration.
func (m *Manager) Snapshot() *busv1.TraceSettings {
	m.mu.Lock()
	defer m.mu.Unlock()
	return proto.Clone(m.snap).(*busv1.TraceSettings)
}

// Changed returns a channel closed at the next applied version.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func newer(a, b *busv1.TraceSettings) bool {
	if a.GetVersion() != b.GetVersion() {
		return a.GetVersion() > b.GetVersion()
	}
	return a.GetOrigin() > b.GetOrigin()
}

// Apply takes s if it is newer than the current configuration, and reports
// whether it did. Counters of rate and count start over, as Triton's do
// when a setting is replaced.
func (m *Manager) Apply(s *busv1.TraceSettings) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !newer(s, m.snap) {
		return false
	}
	m.install(proto.Clone(s).(*busv1.TraceSettings))
	return true
}

func (m *Manager) install(s *busv1.TraceSettings) {
	if s.Global == nil {
		s.Global = &busv1.TraceSettingValues{}
	}
	m.snap = s
	m.tab.Store(m.build(s))
	close(m.changed)
	m.changed = make(chan struct{})
}

func specified(sv *busv1.TraceSettingValues) bool {
	return sv != nil && (sv.Level != nil || sv.Rate != nil || sv.Count != nil || sv.LogFrequency != nil)
}

// Update applies u to model's scope ("" for the global one) and returns
// the new configuration to publish. An update that would leave a tracing
// setting unable to trace is refused with Triton's message.
func (m *Manager) Update(model string, u Update) (*busv1.TraceSettings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	next := proto.Clone(m.snap).(*busv1.TraceSettings)
	if next.Global == nil {
		next.Global = &busv1.TraceSettingValues{}
	}
	var sv *busv1.TraceSettingValues
	if model == "" {
		sv = next.Global
	} else {
		if next.Models == nil {
			next.Models = map[string]*busv1.TraceSettingValues{}
		}
		if sv = next.Models[model]; sv == nil {
			sv = &busv1.TraceSettingValues{}
			next.Models[model] = sv
		}
	}
	switch {
	case u.ClearLevel:
		sv.Level = nil
	case u.Level != nil:
		sv.Level = proto.Uint32(uint32(*u.Level))
	}
	switch {
	case u.ClearRate:
		sv.Rate = nil
	case u.Rate != nil:
		sv.Rate = proto.Uint32(*u.Rate)
	}
	switch {
	case u.ClearCount:
		sv.Count = nil
	case u.Count != nil:
		sv.Count = proto.Int32(*u.Count)
	}
	switch {
	case u.ClearLogFreq:
		sv.LogFrequency = nil
	case u.LogFrequency != nil:
		sv.LogFrequency = proto.Uint32(*u.LogFrequency)
	}
	g := resolve(next.Global, m.cfg.Defaults)
	check := []Values{g}
	if model != "" {
		if !specified(sv) {
			delete(next.Models, model) // nothing left of its own: it follows the global setting
		} else {
			check = []Values{resolve(sv, g)}
		}
	} else {
		// Models that follow the global setting in some field change with it.
		for _, name := range slices.Sorted(maps.Keys(next.Models)) {
			check = append(check, resolve(next.Models[name], g))
		}
	}
	for _, v := range check {
		if r := v.invalidReason(&m.cfg); r != "" && v.Level != LevelOff {
			return nil, tritonerr.InvalidArgf("Attempting to set invalid trace setting :%s", r)
		}
	}
	next.Version = m.snap.GetVersion() + 1
	next.Origin = m.id
	m.install(next)
	return proto.Clone(next).(*busv1.TraceSettings), nil
}

// Setting is one name and value of a trace setting response.
type Setting struct {
	Name   string
	Values []string
	// List is true for trace_level, which HTTP reports as an array.
	List bool
}

// Report lists model's effective settings as Triton's endpoints report
// them, in Triton's order: trace_level, trace_rate, trace_count (the
// traces still allowed on this gateway), in triton mode log_frequency and
// trace_file, then trace_mode and the mode's options.
func (m *Manager) Report(model string) []Setting {
	s := m.Sampler(model)
	v := s.Values()
	out := []Setting{
		{Name: "trace_level", Values: v.Level.Strings(), List: true},
		{Name: "trace_rate", Values: []string{strconv.FormatUint(uint64(v.Rate), 10)}},
		{Name: "trace_count", Values: []string{strconv.FormatInt(int64(s.Remaining()), 10)}},
	}
	if m.cfg.Mode == ModeTriton {
		out = append(out,
			Setting{Name: "log_frequency", Values: []string{strconv.FormatUint(uint64(v.LogFrequency), 10)}},
			Setting{Name: "trace_file", Values: []string{m.cfg.File}})
	}
	out = append(out, Setting{Name: "trace_mode", Values: []string{string(m.cfg.Mode)}})
	keys := make([]string, 0, len(m.cfg.Options))
	for k := range m.cfg.Options {
		if k == "file" || k == "log-frequency" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, Setting{Name: k, Values: []string{m.cfg.Options[k]}})
	}
	return out
}

// stoi reads an int the way std::stoi does (leading blanks, a sign, the
// longest run of digits; what follows is ignored), which decides which
// values Triton accepts.
func stoi(s string) (int64, error) {
	t := strings.TrimLeft(s, " \t\n\v\f\r")
	i := 0
	if i < len(t) && (t[i] == '+' || t[i] == '-') {
		i++
	}
	j := i
	for j < len(t) && t[j] >= '0' && t[j] <= '9' {
		j++
	}
	if j == i {
		return 0, errInvalid
	}
	n, err := strconv.ParseInt(t[:j], 10, 32)
	if err != nil {
		return 0, errRange
	}
	return n, nil
}

type parseErr string

func (e parseErr) Error() string { return string(e) }

const (
	errInvalid parseErr = "invalid"
	errRange   parseErr = "range"
)

// number parses one numeric setting with Triton's messages. grpcStyle
// selects the gRPC handler's wording of the trace_count bound, which
// differs from the HTTP one by a space.
func number(name, s string, grpcStyle bool) (int64, error) {
	n, err := stoi(s)
	switch {
	case err == errInvalid:
		return 0, tritonerr.InvalidArgf("Unable to parse '%s', got: %s", name, s)
	case err == errRange && name == "trace_count":
		return 0, tritonerr.InvalidArgf("Unable to parse '%s', value is out of range [ %d, %d ], got: %s", name, MinCount, int32(1<<31-1), s)
	case err == errRange:
		return 0, tritonerr.InvalidArgf("Unable to parse '%s', value is out of range [ %d, %d ], got: %s", name, 0, uint32(1<<32-1), s)
	}
	if name == "trace_count" && n < MinCount {
		if grpcStyle {
			return 0, tritonerr.InvalidArgf("Unable to parse 'trace_count'. Expecting value >= %d, got: %s", MinCount, s)
		}
		return 0, tritonerr.InvalidArgf("Unable to parse 'trace_count'. Expecting value >= %d, got:%s", MinCount, s)
	}
	return n, nil
}

var errTraceFile = tritonerr.Unsupportedf("trace file location can not be updated through network protocol")

// parseLevels reads trace_level values; an empty list changes nothing.
func parseLevels(vals []string) (*Level, error) {
	var l Level
	set := false
	for _, s := range vals {
		switch s {
		case "OFF":
			if len(vals) != 1 {
				return nil, tritonerr.InvalidArgf("Expect only one trace level 'OFF' is specified")
			}
			set = true
		case "TIMESTAMPS":
			l |= LevelTimestamps
			set = true
		case "TENSORS":
			l |= LevelTensors
			set = true
		}
	}
	if !set {
		return nil, nil
	}
	return &l, nil
}

// setNumber stores a parsed numeric setting into u.
func setNumber(u *Update, name string, n int64) {
	switch name {
	case "trace_rate":
		r := uint32(n) // std::stoi into a uint32_t: Triton wraps negatives alike
		u.Rate = &r
	case "trace_count":
		c := int32(n)
		u.Count = &c
	case "log_frequency":
		f := uint32(n)
		u.LogFrequency = &f
	}
}

func clearNumber(u *Update, name string) {
	switch name {
	case "trace_rate":
		u.ClearRate = true
	case "trace_count":
		u.ClearCount = true
	case "log_frequency":
		u.ClearLogFreq = true
	}
}

var numberNames = []string{"trace_rate", "trace_count", "log_frequency"}

// ParseGRPC reads the settings of a gRPC TraceSettingRequest: an empty
// value list clears a setting.
func ParseGRPC(settings map[string][]string) (Update, error) {
	var u Update
	if _, ok := settings["trace_file"]; ok {
		return u, errTraceFile
	}
	if vals, ok := settings["trace_level"]; ok {
		if len(vals) == 0 {
			u.ClearLevel = true
		} else {
			l, err := parseLevels(vals)
			if err != nil {
				return u, err
			}
			u.Level = l
		}
	}
	for _, name := range numberNames {
		vals, ok := settings[name]
		if !ok {
			continue
		}
		switch len(vals) {
		case 0:
			clearNumber(&u, name)
		case 1:
			n, err := number(name, vals[0], true)
			if err != nil {
				return u, err
			}
			setNumber(&u, name, n)
		default:
			return u, tritonerr.InvalidArgf("expect only 1 value for '%s'", name)
		}
	}
	return u, nil
}

// JSONValue is one member of an HTTP trace setting request: null, a
// string, or an array of strings (decoded by the caller's JSON reader).
type JSONValue struct {
	Null   bool
	String *string
	Array  []string
	// IsArray is true for an array, even an empty one.
	IsArray bool
	// Kind names the JSON type when it is none of the above.
	Kind string
}

// ParseHTTP reads the members of an HTTP trace setting request: null
// clears a setting, trace_level takes an array and the numbers take
// strings.
func ParseHTTP(members map[string]JSONValue) (Update, error) {
	var u Update
	if _, ok := members["trace_file"]; ok {
		return u, errTraceFile
	}
	if v, ok := members["trace_level"]; ok {
		switch {
		case v.Null:
			u.ClearLevel = true
		case v.IsArray:
			l, err := parseLevels(v.Array)
			if err != nil {
				return u, err
			}
			u.Level = l
		default:
			return u, tritonerr.InvalidArgf("Unable to parse 'trace_level', expected an array of strings, got %s", describe(v))
		}
	}
	for _, name := range numberNames {
		v, ok := members[name]
		if !ok {
			continue
		}
		switch {
		case v.Null:
			clearNumber(&u, name)
		case v.String != nil:
			n, err := number(name, *v.String, false)
			if err != nil {
				return u, err
			}
			setNumber(&u, name, n)
		default:
			return u, tritonerr.InvalidArgf("Unable to parse '%s', expected a string, got %s", name, describe(v))
		}
	}
	return u, nil
}

func describe(v JSONValue) string {
	switch {
	case v.IsArray:
		return "an array"
	case v.Kind != "":
		return v.Kind
	}
	return fmt.Sprintf("%v", v)
}
