package logsetting

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/nereid-io/nereid/pkg/tritonflag"
)

// Flags are tritonserver's logging flags: --log-verbose, --log-info,
// --log-warning, --log-error, --log-format and --log-file.
type Flags struct {
	verbose              uint
	info, warning, error bool
	format, file         string
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.UintVar(&f.verbose, "log-verbose", 0, "verbose logging level (0 off)")
	tritonflag.BoolVar(fs, &f.info, "log-info", true, "log information messages")
	tritonflag.BoolVar(fs, &f.warning, "log-warning", true, "log warnings")
	tritonflag.BoolVar(fs, &f.error, "log-error", true, "log errors")
	fs.StringVar(&f.format, "log-format", string(FormatDefault), "log line format: default, ISO8601 or json")
	fs.StringVar(&f.file, "log-file", "", "write the log to this file (appended) instead of standard error")
}

// Build returns the settings the flags describe and a logger obeying
// them. The log file, if any, stays open for the life of the process.
func (f *Flags) Build() (*Manager, *slog.Logger, error) {
	format, ok := ParseFormat(f.format)
	if !ok {
		return nil, nil, fmt.Errorf("invalid argument for --log-format, got: %s (default, ISO8601, json)", f.format)
	}
	var w io.Writer = os.Stderr
	if f.file != "" {
		fh, err := os.OpenFile(f.file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("--log-file: %w", err)
		}
		w = fh
	}
	m := New(Values{File: f.file, Info: f.info, Warning: f.warning, Error: f.error, VerboseLevel: uint32(f.verbose), Format: format}, "")
	return m, slog.New(NewHandler(m, w)), nil
}

// MustBuild is Build for a main: a bad flag ends the program with the
// message, as flag parsing does.
func (f *Flags) MustBuild(program string) (*Manager, *slog.Logger) {
	m, l, err := f.Build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(2)
	}
	return m, l
}
