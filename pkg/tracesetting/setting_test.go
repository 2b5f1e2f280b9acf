package tracesetting

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func ptr[T any](v T) *T { return &v }

func report(m *Manager, model string) map[string][]string {
	out := map[string][]string{}
	for _, s := range m.Report(model) {
		out[s.Name] = s.Values
	}
	return out
}

func TestDefaultsReported(t *testing.T) {
	m := New(DefaultConfig(), "g1")
	want := map[string][]string{
		"trace_level": {"OFF"}, "trace_rate": {"1000"}, "trace_count": {"-1"}, "trace_mode": {"opentelemetry"},
	}
	if got := report(m, ""); !reflect.DeepEqual(got, want) {
		t.Fatalf("report = %v, want %v", got, want)
	}
	if got := report(m, "simple"); !reflect.DeepEqual(got, want) {
		t.Fatalf("model report = %v, want the global %v", got, want)
	}
}

func TestModelOverridesFollowGlobal(t *testing.T) {
	m := New(DefaultConfig(), "g1")
	if _, err := m.Update("simple", Update{Rate: ptr(uint32(5))}); err != nil {
		t.Fatal(err)
	}
	// The model's level is unspecified: it follows the global one.
	if _, err := m.Update("", Update{Level: ptr(LevelTimestamps)}); err != nil {
		t.Fatal(err)
	}
	if got := m.Get("simple"); got != (Values{Level: LevelTimestamps, Rate: 5, Count: -1}) {
		t.Fatalf("simple = %+v", got)
	}
	if got := m.Get("other"); got != (Values{Level: LevelTimestamps, Rate: 1000, Count: -1}) {
		t.Fatalf("other = %+v", got)
	}
	// Clearing the model's only field removes its setting.
	snap, err := m.Update("simple", Update{ClearRate: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.GetModels()) != 0 {
		t.Fatalf("models left after clearing every field: %v", snap.GetModels())
	}
	// Clearing a global field goes back to the startup default.
	if _, err := m.Update("", Update{ClearLevel: true}); err != nil {
		t.Fatal(err)
	}
	if got := m.Get(""); got != Defaults {
		t.Fatalf("global after clear = %+v, want %+v", got, Defaults)
	}
}

func TestInvalidSettingRefused(t *testing.T) {
	m := New(DefaultConfig(), "g1")
	_, err := m.Update("", Update{Level: ptr(LevelTimestamps), Rate: ptr(uint32(0))})
	if err == nil || err.Error() != "Attempting to set invalid trace setting :sample rate must be non-zero" {
		t.Fatalf("err = %v", err)
	}
	// Rate 0 while tracing is off is allowed, as Triton allows it.
	if _, err := m.Update("", Update{Rate: ptr(uint32(0))}); err != nil {
		t.Fatal(err)
	}
	// ...but then turning tracing on is not, nor for a model that follows.
	if _, err := m.Update("simple", Update{Level: ptr(LevelTimestamps)}); err == nil {
		t.Fatal("a model tracing at the global rate 0 was accepted")
	}
	if m.Snapshot().GetVersion() != 1 {
		t.Fatalf("refused updates changed the version: %d", m.Snapshot().GetVersion())
	}
}

func TestSampleRateAndCount(t *testing.T) {
	m := New(DefaultConfig(), "g1")
	if m.Sample("simple") {
		t.Fatal("sampled with tracing off")
	}
	if _, err := m.Update("", Update{Level: ptr(LevelTimestamps), Rate: ptr(uint32(3)), Count: ptr(int32(2))}); err != nil {
		t.Fatal(err)
	}
	var got []int
	for i := 1; i <= 12; i++ {
		if m.Sample("simple") {
			got = append(got, i)
		}
	}
	if !reflect.DeepEqual(got, []int{3, 6}) {
		t.Fatalf("sampled requests %v, want [3 6] (rate 3, count 2)", got)
	}
	// trace_count is reported as Triton does: what is left of it.
	if got := report(m, "")["trace_count"]; !reflect.DeepEqual(got, []string{"0"}) {
		t.Fatalf("trace_count after two traces of 2 = %v, want [0]", got)
	}
	// A model of its own counts apart.
	if _, err := m.Update("other", Update{Rate: ptr(uint32(1))}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i < 5; i++ {
		if m.Sample("other") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("other sampled %d of 5, want 2 (count 2 inherited)", n)
	}
}

func TestSampleDoesNotAllocate(t *testing.T) {
	m := New(DefaultConfig(), "g1")
	off := testing.AllocsPerRun(1000, func() { m.Sample("simple") })
	if _, err := m.Update("", Update{Level: ptr(LevelTimestamps), Rate: ptr(uint32(1))}); err != nil {
		t.Fatal(err)
	}
	on := testing.AllocsPerRun(1000, func() { m.Sample("simple") })
	if off != 0 || on != 0 {
		t.Fatalf("Sample allocates: %v off, %v on", off, on)
	}
}

func TestApplyKeepsNewest(t *testing.T) {
	a, b := New(DefaultConfig(), "a"), New(DefaultConfig(), "b")
	s1, _ := a.Update("", Update{Rate: ptr(uint32(7))})
	if !b.Apply(s1) || b.Get("").Rate != 7 {
		t.Fatalf("b did not take a's version: %+v", b.Get(""))
	}
	s2, _ := b.Update("", Update{Rate: ptr(uint32(9))})
	if b.Apply(s1) {
		t.Fatal("an older version replaced a newer one")
	}
	if !a.Apply(s2) || a.Get("").Rate != 9 {
		t.Fatalf("a = %+v", a.Get(""))
	}
}

func TestParseGRPC(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string][]string
		want     Update
		kind     tritonerr.Kind
		msg      string
	}{
		{"level", map[string][]string{"trace_level": {"TIMESTAMPS", "TENSORS"}}, Update{Level: ptr(LevelTimestamps | LevelTensors)}, 0, ""},
		{"clear", map[string][]string{"trace_level": {}, "trace_rate": {}}, Update{ClearLevel: true, ClearRate: true}, 0, ""},
		{"numbers", map[string][]string{"trace_rate": {"10"}, "trace_count": {"-1"}, "log_frequency": {"2"}}, Update{Rate: ptr(uint32(10)), Count: ptr(int32(-1)), LogFrequency: ptr(uint32(2))}, 0, ""},
		{"stoi prefix", map[string][]string{"trace_rate": {"12abc"}}, Update{Rate: ptr(uint32(12))}, 0, ""},
		{"file", map[string][]string{"trace_file": {"x"}}, Update{}, tritonerr.Unsupported, "trace file location can not be updated through network protocol"},
		{"off and more", map[string][]string{"trace_level": {"OFF", "TIMESTAMPS"}}, Update{}, tritonerr.InvalidArg, "Expect only one trace level 'OFF' is specified"},
		{"rate text", map[string][]string{"trace_rate": {"abc"}}, Update{}, tritonerr.InvalidArg, "Unable to parse 'trace_rate', got: abc"},
		{"rate range", map[string][]string{"trace_rate": {"99999999999"}}, Update{}, tritonerr.InvalidArg, "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 99999999999"},
		{"count low", map[string][]string{"trace_count": {"-2"}}, Update{}, tritonerr.InvalidArg, "Unable to parse 'trace_count'. Expecting value >= -1, got: -2"},
		{"count range", map[string][]string{"trace_count": {"99999999999"}}, Update{}, tritonerr.InvalidArg, "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 99999999999"},
		{"two values", map[string][]string{"log_frequency": {"1", "2"}}, Update{}, tritonerr.InvalidArg, "expect only 1 value for 'log_frequency'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGRPC(tt.settings)
			if tt.msg != "" {
				te := tritonerr.From(err)
				if err == nil || te.Kind != tt.kind || te.Msg != tt.msg {
					t.Fatalf("err = %v, want %v %q", err, tt.kind, tt.msg)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseHTTP(t *testing.T) {
	s := func(v string) JSONValue { return JSONValue{String: &v} }
	tests := []struct {
		name    string
		members map[string]JSONValue
		want    Update
		msg     string
	}{
		{"null clears", map[string]JSONValue{"trace_level": {Null: true}, "trace_count": {Null: true}}, Update{ClearLevel: true, ClearCount: true}, ""},
		{"values", map[string]JSONValue{"trace_level": {IsArray: true, Array: []string{"TIMESTAMPS"}}, "trace_rate": s("4")}, Update{Level: ptr(LevelTimestamps), Rate: ptr(uint32(4))}, ""},
		{"count low, HTTP wording", map[string]JSONValue{"trace_count": s("-5")}, Update{}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-5"},
		{"number not string", map[string]JSONValue{"trace_rate": {Kind: "a number"}}, Update{}, "Unable to parse 'trace_rate', expected a string, got a number"},
		{"level not array", map[string]JSONValue{"trace_level": s("TIMESTAMPS")}, Update{}, "Unable to parse 'trace_level', expected an array of strings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHTTP(tt.members)
			if tt.msg != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.msg) {
					t.Fatalf("err = %v, want %q", err, tt.msg)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestFlag(t *testing.T) {
	var f Flag
	for _, v := range []string{"level=TIMESTAMPS", "rate=1", "count=10", "mode=opentelemetry", "opentelemetry,url=localhost:4317", "opentelemetry,resource=a=b", "opentelemetry,resource=c=d"} {
		if err := f.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	c := f.Config()
	if c.Mode != ModeOpenTelemetry || c.Defaults != (Values{Level: LevelTimestamps, Rate: 1, Count: 10}) ||
		c.Options["url"] != "localhost:4317" || c.Options["resource"] != "a=b,c=d" {
		t.Fatalf("config = %+v", c)
	}
	for _, bad := range []string{"rate=x", "count=-2", "level=LOUD", "mode=jaeger", "triton,url=x", "triton,log-frequency=-1", "bogus=1", "nonsense"} {
		var f Flag
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
	var none Flag
	if none.Config().Defaults != Defaults {
		t.Fatal("no flag: not the defaults")
	}
}

// Triton's mode: --trace-config triton,file=... alone selects it, and the
// settings report log_frequency and trace_file, in Triton's order.
func TestTritonModeFlagAndReport(t *testing.T) {
	cases := []struct {
		flags []string
		mode  Mode
	}{
		{[]string{"triton,file=/tmp/t.json", "level=TIMESTAMPS", "rate=1"}, ModeTriton},
		{[]string{"mode=triton", "triton,file=/tmp/t.json"}, ModeTriton},
		{[]string{"triton,file=/tmp/t.json", "mode=opentelemetry"}, ModeOpenTelemetry},
		{[]string{"level=TIMESTAMPS"}, ModeOpenTelemetry},
	}
	for _, tc := range cases {
		var f Flag
		for _, v := range tc.flags {
			if err := f.Set(v); err != nil {
				t.Fatalf("Set(%q): %v", v, err)
			}
		}
		if got := f.Config().Mode; got != tc.mode {
			t.Errorf("%v: mode %s, want %s", tc.flags, got, tc.mode)
		}
	}
	var f Flag
	for _, v := range []string{"triton,file=/tmp/t.json", "triton,log-frequency=50", "rate=100", "level=TIMESTAMPS", "count=100"} {
		if err := f.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	c := f.Config()
	if c.File != "/tmp/t.json" || c.Defaults != (Values{Level: LevelTimestamps, Rate: 100, Count: 100, LogFrequency: 50}) {
		t.Fatalf("config = %+v", c)
	}
	var names []string
	for _, s := range New(c, "g1").Report("simple") {
		names = append(names, s.Name)
	}
	if want := []string{"trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file", "trace_mode"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("reported %v, want %v", names, want)
	}
	if got, want := report(New(c, "g1"), ""), map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_rate": {"100"},
		"trace_count": {"100"}, "log_frequency": {"50"}, "trace_file": {"/tmp/t.json"}, "trace_mode": {"triton"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("report = %v, want %v", got, want)
	}
}

// Triton mode without a file traces nothing, and refuses to be turned on
// with Triton's reason.
func TestTritonModeWithoutFile(t *testing.T) {
	m := New(Config{Mode: ModeTriton, Defaults: Values{Level: LevelTimestamps, Rate: 1, Count: -1}}, "g1")
	if m.Sample("simple") {
		t.Fatal("sampled without a trace file")
	}
	_, err := m.Update("", Update{Rate: ptr(uint32(2))})
	if err == nil || err.Error() != "Attempting to set invalid trace setting :trace file name is not given" {
		t.Fatalf("update without a file: %v", err)
	}
	if _, err := m.Update("", Update{Level: ptr(LevelOff)}); err != nil {
		t.Fatalf("turning tracing off: %v", err)
	}
}

// A change replaces the samplers it touches: the old one is no longer
// active, which tells the trace file writer to flush what it gathered.
func TestSamplerReplacedByChange(t *testing.T) {
	m := New(Config{Mode: ModeTriton, File: "/tmp/x", Defaults: Values{Level: LevelTimestamps, Rate: 1, Count: -1}}, "g1")
	s := m.Sampler("simple")
	if !m.Active(s) || !s.Sample() {
		t.Fatal("the global sampler is not active, or does not sample at rate 1")
	}
	if _, err := m.Update("simple", Update{LogFrequency: ptr(uint32(2))}); err != nil {
		t.Fatal(err)
	}
	if m.Active(s) {
		t.Fatal("the replaced sampler is still active")
	}
	if ms := m.Sampler("simple"); !m.Active(ms) || ms.Values().LogFrequency != 2 || ms == m.Sampler("") {
		t.Fatalf("simple's own sampler: %+v", ms.Values())
	}
}
