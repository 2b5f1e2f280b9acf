package tracesetting

import (
	"fmt"
	"strconv"
	"strings"
)

// Flag is tritonserver's repeatable --trace-config: global settings as
// <setting>=<value> (level, rate, count, log_frequency, mode) and a mode's
// own as <mode>,<setting>=<value> (triton,file=..., triton,log-frequency=...,
// opentelemetry,url=..., opentelemetry,resource=..., opentelemetry,bsp_...).
//
// Without mode=, the mode is triton when a triton,<setting> was given
// (tritonserver --trace-config triton,file=/tmp/trace.json writes JSON
// trace files, Triton's default mode), else opentelemetry.
type Flag struct {
	cfg  Config
	seen bool
	// modeSet: mode= was given; triton: a triton,<setting> was.
	modeSet, triton bool
}

// Config returns the configuration the flags describe.
func (f *Flag) Config() Config {
	if !f.seen {
		return DefaultConfig()
	}
	c := f.cfg
	if !f.modeSet && f.triton {
		c.Mode = ModeTriton
	}
	return c
}

// String implements flag.Value.
func (f *Flag) String() string {
	if f == nil || !f.seen {
		return ""
	}
	return fmt.Sprintf("mode=%s,level=%s,rate=%d,count=%d", f.Config().Mode, strings.Join(f.cfg.Defaults.Level.Strings(), "|"), f.cfg.Defaults.Rate, f.cfg.Defaults.Count)
}

// Set implements flag.Value.
func (f *Flag) Set(v string) error {
	if !f.seen {
		f.cfg = DefaultConfig()
		f.seen = true
	}
	mode, rest, scoped := strings.Cut(v, ",")
	if !scoped {
		rest, mode = v, ""
	}
	key, val, ok := strings.Cut(rest, "=")
	if !ok {
		return fmt.Errorf("--trace-config %q: expected [<mode>,]<setting>=<value>", v)
	}
	switch Mode(mode) {
	case "":
		return f.setGlobal(v, key, val)
	case ModeOpenTelemetry:
		if f.cfg.Options == nil {
			f.cfg.Options = map[string]string{}
		}
		if key == "resource" && f.cfg.Options[key] != "" {
			val = f.cfg.Options[key] + "," + val
		}
		f.cfg.Options[key] = val
		return nil
	case ModeTriton:
		f.triton = true
		switch key {
		case "file":
			f.cfg.File = val
		case "log-frequency", "log_frequency":
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return fmt.Errorf("--trace-config %q: log-frequency must be an unsigned 32-bit integer", v)
			}
			f.cfg.Defaults.LogFrequency = uint32(n)
		default:
			return fmt.Errorf("--trace-config %q: unknown setting %q of trace mode triton (file, log-frequency)", v, key)
		}
		return nil
	}
	return fmt.Errorf("--trace-config %q: unknown trace mode %q (triton, opentelemetry)", v, mode)
}

func (f *Flag) setGlobal(v, key, val string) error {
	d := &f.cfg.Defaults
	switch key {
	case "mode":
		switch Mode(val) {
		case ModeOpenTelemetry, ModeTriton:
			f.cfg.Mode = Mode(val)
			f.modeSet = true
		default:
			return fmt.Errorf("--trace-config %q: unknown trace mode %q (triton, opentelemetry)", v, val)
		}
	case "level":
		switch strings.ToUpper(val) {
		case "OFF":
			d.Level = LevelOff
		case "TIMESTAMPS":
			d.Level |= LevelTimestamps
		case "TENSORS":
			d.Level |= LevelTensors
		default:
			return fmt.Errorf("--trace-config %q: unknown trace level %q (OFF, TIMESTAMPS, TENSORS)", v, val)
		}
	case "rate":
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return fmt.Errorf("--trace-config %q: rate must be an unsigned 32-bit integer", v)
		}
		d.Rate = uint32(n)
	case "count":
		n, err := strconv.ParseInt(val, 10, 32)
		if err != nil || n < MinCount {
			return fmt.Errorf("--trace-config %q: count must be an integer >= %d", v, MinCount)
		}
		d.Count = int32(n)
	case "log_frequency", "log-frequency":
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return fmt.Errorf("--trace-config %q: log_frequency must be an unsigned 32-bit integer", v)
		}
		d.LogFrequency = uint32(n)
	default:
		return fmt.Errorf("--trace-config %q: unknown setting %q (level, rate, count, log_frequency, mode)", v, key)
	}
	return nil
}
