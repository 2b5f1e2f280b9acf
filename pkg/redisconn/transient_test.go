package redisconn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nereid-io/nereid/pkg/backoff"
	"github.com/nereid-io/nereid/pkg/redisconn"
)

func TestTransient(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "x"}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"loading", errors.New("LOADING Redis is loading the dataset in memory"), true},
		{"eof", io.EOF, true},
		{"unexpected eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"refused", syscall.ECONNREFUSED, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"net op error", opErr, true},
		{"script error", errors.New("NOLEASE"), false},
		{"wrong type", errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{"wrong password", errors.New("WRONGPASS invalid username-password pair or user is disabled."), false},
		{"no permission", errors.New("NOPERM User sequence-router has no permissions to run the 'debug' command"), false},
		{"our deadline", context.DeadlineExceeded, false},
		{"cancelled", context.Canceled, false},
		{"client closed", redis.ErrClosed, false},
		{"nil reply", redis.Nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redisconn.Transient(tt.err); got != tt.want {
				t.Fatalf("Transient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestRetryStopsAtPermanentAndContext(t *testing.T) {
	b := &backoff.Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}
	n := 0
	err := redisconn.Retry(context.Background(), b, func(context.Context) error {
		n++
		if n < 3 {
			return errors.New("LOADING Redis is loading the dataset in memory")
		}
		return errors.New("NOLEASE")
	})
	if n != 3 || err == nil || err.Error() != "NOLEASE" {
		t.Fatalf("%d tries, %v: want 3 tries ending with NOLEASE", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = redisconn.Retry(ctx, b, func(context.Context) error { return io.EOF })
	if !errors.Is(err, io.EOF) || ctx.Err() == nil {
		t.Fatalf("Retry returned %v before its context ended", err)
	}
}

// loadingServer runs a plaintext redis-server in dir on port (DEBUG
// allowed, no persistence but an explicit SAVE).
func loadingServer(t *testing.T, port int, dir string) *exec.Cmd {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (make deps installs it)")
	}
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--enable-debug-command", "local")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	return cmd
}

// A restarted Redis answers LOADING while it reads a large data set back;
// Transient says so, and Retry carries a write through the load instead of
// failing with it.
func TestRetryThroughLoading(t *testing.T) {
	port, dir := freePort(t), t.TempDir()
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	first := loadingServer(t, port, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rdb, err := redisconn.Open(ctx, url, redisconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	// A data set that takes a while to load: a few million keys, made by a
	// client patient enough for the commands that make it.
	slow := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ReadTimeout: 2 * time.Minute})
	defer slow.Close()
	if err := slow.Do(ctx, "DEBUG", "POPULATE", 3_000_000, "k", 16).Err(); err != nil {
		t.Fatalf("DEBUG POPULATE: %v", err)
	}
	if err := slow.Save(ctx).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	_ = first.Process.Kill()
	_ = first.Wait()

	loadingServer(t, port, dir)
	// Connection refused until it listens, then LOADING until the data set
	// is in memory: both are transient, and the write goes through after.
	var seen []string
	began := time.Now()
	err = redisconn.Retry(ctx, &backoff.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}, func(ctx context.Context) error {
		err := rdb.Set(ctx, "after-restart", "1", 0).Err()
		if err != nil && (len(seen) == 0 || seen[len(seen)-1] != err.Error()) {
			seen = append(seen, err.Error())
		}
		return err
	})
	if err != nil {
		t.Fatalf("the write failed after %v: %v (errors seen: %q)", time.Since(began), err, seen)
	}
	loading := false
	for _, s := range seen {
		loading = loading || strings.HasPrefix(s, "LOADING ")
	}
	if !loading {
		t.Fatalf("no LOADING answer seen during the restart (the data set loaded too fast?): %q", seen)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n < 3_000_000 {
		t.Fatalf("after the load: %d keys, %v", n, err)
	}
	t.Logf("write retried through the restart for %v; answers seen: %q", time.Since(began).Round(time.Millisecond), seen)
}
