package containers

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/compose"
)

// The project every test of the package shares, up for the whole run, and
// where its gateway answers.
var (
	proj     *compose.Project
	httpBase string // http://127.0.0.1:port
	grpcAddr string // 127.0.0.1:port
	metrics  string // http://127.0.0.1:port/metrics
	natsMon  string // http://127.0.0.1:port (NATS monitoring)
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := compose.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/containers:", err)
		return 1
	}
	if err := compose.Check(root); err != nil {
		if compose.Required() {
			fmt.Fprintf(os.Stderr, "FAIL: e2e/containers cannot run, and this machine must run it "+
				"(NEREID_DOCKER=%q, CI=%q): %v\n", os.Getenv("NEREID_DOCKER"), os.Getenv("CI"), err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e/containers: skipped: %v\n", err)
		return 0
	}
	compose.RemoveStale(root)
	proj = compose.New(root, "e2e/containers/testdata/ports.yml")

	// The project goes away however the run ends: normally, failing, or
	// interrupted (a run killed harder is removed by the next one's RemoveStale).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		_ = proj.Down()
		os.Exit(1)
	}()
	defer func() {
		if err := proj.Down(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := proj.Up(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		dumpLogs()
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e/containers: docker compose up --wait (project %s): %v\n", proj.Name, time.Since(start).Round(time.Millisecond))
	for _, p := range []struct {
		service string
		port    int
		dst     *string
		format  string
	}{
		{"gateway", 8000, &httpBase, "http://%s"},
		{"gateway", 8001, &grpcAddr, "%s"},
		{"gateway", 8002, &metrics, "http://%s/metrics"},
		{"nats", 8222, &natsMon, "http://%s"},
	} {
		addr, err := proj.Port(ctx, p.service, p.port)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		*p.dst = fmt.Sprintf(p.format, addr)
	}
	code := m.Run()
	if code != 0 {
		dumpLogs()
	}
	return code
}

// dumpLogs prints the end of every container's output, for a failed run.
func dumpLogs() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := proj.Compose(ctx, "logs", "--no-color", "--tail", "60")
	fmt.Fprintf(os.Stderr, "--- docker compose logs (last 60 lines each) ---\n%s\n", out)
}
