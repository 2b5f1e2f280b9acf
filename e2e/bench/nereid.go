package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nereid-io/nereid/services/standalone"
)

// Nereid is the standalone composition (embedded NATS, gateway, executor,
// registry, router) running in this process on loopback ports.
type Nereid struct {
	HTTPAddr, GRPCAddr string
	srv                *standalone.Server

	cancel context.CancelFunc
	done   chan error
}

// RepoDir is the model repository the benchmarks serve: NEREID_BENCH_REPO
// if set (e.g. ../../deploy/model_repository, whose identity_fp32 waits up
// to 500 µs to batch), else testdata/model_repository.
func RepoDir() (string, error) {
	dir := os.Getenv("NEREID_BENCH_REPO")
	if dir == "" {
		dir = filepath.Join("testdata", "model_repository")
	}
	return filepath.Abs(dir)
}

// StartNereid starts the standalone server on free loopback ports with only
// the benchmark model loaded, and waits until the model is ready. inProcess
// is its --in-process-bus: the gateway's requests reach the executor
// without NATS (the fast path), or over the embedded NATS server as
// between the constellation's services.
func StartNereid(inProcess bool) (*Nereid, error) {
	repo, err := RepoDir()
	if err != nil {
		return nil, err
	}
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Models = []string{Model}
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.InProcessBus = inProcess
	srv, err := standalone.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Nereid{srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-n.done:
		cancel()
		return nil, fmt.Errorf("standalone server stopped while starting: %v", err)
	case <-time.After(60 * time.Second):
		n.Close()
		return nil, errors.New("standalone server not ready after 60s")
	}
	n.HTTPAddr, n.GRPCAddr = srv.Gateway().HTTPAddr(), srv.Gateway().GRPCAddr()
	if err := n.waitModelReady(30 * time.Second); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// waitModelReady polls the model's ready endpoint: the gateway learns the
// catalog from the executor's heartbeat, shortly after both are up.
func (n *Nereid) waitModelReady(limit time.Duration) error { return n.waitReady(Model, limit) }

// waitReady polls one model's ready endpoint.
func (n *Nereid) waitReady(model string, limit time.Duration) error {
	url := "http://" + n.HTTPAddr + "/v2/models/" + model + "/ready"
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("model %s not ready after %s (last: %v)", model, limit, statusOr(resp, err))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func statusOr(resp *http.Response, err error) any {
	if err != nil {
		return err
	}
	return resp.Status
}

// InProcess counts the requests the server's in-process bus carried.
func (n *Nereid) InProcess() uint64 {
	if n.srv == nil {
		return 0
	}
	return n.srv.InProcess()
}

// Close stops the server and waits for it.
func (n *Nereid) Close() {
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
	}
}

// runStandalone starts a standalone server with cfg, waits until it and
// models are ready, and returns it with the function that stops it (and
// waits, at most 10s, for it to stop). On error nothing is left running.
func runStandalone(cfg standalone.Config, models ...string) (*standalone.Server, func(), error) {
	srv, err := standalone.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("standalone server stopped while starting: %v", err)
	case <-time.After(60 * time.Second):
		stop()
		return nil, nil, errors.New("standalone server not ready after 60s")
	}
	n := &Nereid{HTTPAddr: srv.Gateway().HTTPAddr()}
	for _, m := range models {
		if err := n.waitReady(m, 30*time.Second); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return srv, stop, nil
}
