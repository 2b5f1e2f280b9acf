// Package tritonflag provides command-line flags in tritonserver's form.
//
// tritonserver takes booleans as `--allow-http false` or `--allow-http=false`.
// Go's flag.Bool treats a bare `--allow-http` as true and then stops parsing
// at the stray `false`, silently ignoring every flag after it; Bool here
// always takes a value, so both spellings work and nothing is dropped.
package tritonflag

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

type boolValue struct{ p *bool }

func (b boolValue) String() string {
	if b.p == nil {
		return "false"
	}
	return strconv.FormatBool(*b.p)
}

func (b boolValue) Set(s string) error {
	v, err := ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = v
	return nil
}

// ParseBool reads a boolean as tritonserver's flags take it: true, 1, on,
// yes or false, 0, off, no, in any case.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1", "on", "yes":
		return true, nil
	case "false", "0", "off", "no":
		return false, nil
	}
	return false, fmt.Errorf("invalid boolean value %q (want true or false)", s)
}

// Bool defines a boolean flag that requires a value, as tritonserver's do.
func Bool(fs *flag.FlagSet, name string, def bool, usage string) *bool {
	p := new(bool)
	*p = def
	fs.Var(boolValue{p}, name, usage)
	return p
}

// BoolVar is Bool with a caller-provided destination.
func BoolVar(fs *flag.FlagSet, p *bool, name string, def bool, usage string) {
	*p = def
	fs.Var(boolValue{p}, name, usage)
}

// Strings is a repeatable string flag (e.g. --load-model a --load-model b).
type Strings []string

func (s *Strings) String() string { return strings.Join(*s, ",") }

// Set appends one value.
func (s *Strings) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// LogVerbose registers tritonserver's --log-verbose flag (a level; 0 is
// off) on fs and returns the logger to build once fs is parsed: text on
// standard error, at debug level when verbose.
func LogVerbose(fs *flag.FlagSet) func() *slog.Logger {
	level := fs.Int("log-verbose", 0, "verbose logging level (0 off)")
	return func() *slog.Logger {
		l := slog.LevelInfo
		if *level > 0 {
			l = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	}
}

// secretValue is a string flag that never prints what it holds.
type secretValue struct{ p *string }

func (s secretValue) String() string { return "" }

func (s secretValue) Set(v string) error {
	*s.p = v
	return nil
}

// SecretVar defines a string flag for a password or token: -h shows no
// default and nothing prints its value.
func SecretVar(fs *flag.FlagSet, p *string, name, usage string) {
	fs.Var(secretValue{p}, name, usage)
}

// EnvDefaults sets each destination still empty (no flag given) to its
// environment variable, so that flags win over the environment.
func EnvDefaults(vars map[string]*string) {
	for env, p := range vars {
		if *p == "" {
			*p = os.Getenv(env)
		}
	}
}
