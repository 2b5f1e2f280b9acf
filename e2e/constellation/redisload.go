package constellation

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/redisconn"
	"github.com/nereid-io/nereid/pkg/redisconn/redistest"
)

// RedisDataset writes dir/dump.rdb holding keys keys (16-byte values),
// made by a private plaintext redis-server allowed DEBUG POPULATE: a
// secured Redis started on dir with "--appendonly no" reads it at start,
// and answers LOADING for as long as that takes (a few seconds for
// millions of keys).
func RedisDataset(t testing.TB, dir string, keys int) {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (make deps installs it)")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is not installed")
	}
	port := strconv.Itoa(FreePort(t))
	p := Start(t, "redis-dataset", path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--enable-debug-command", "local")
	defer p.Kill()
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, cli, append([]string{"-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if !WaitFor(15*time.Second, func() bool {
		out, err := exec.Command(cli, "-p", port, "PING").CombinedOutput()
		return err == nil && strings.TrimSpace(string(out)) == "PONG"
	}) {
		t.Fatalf("redis-server for the data set did not start:\n%s", p.Output())
	}
	if out := run("DEBUG", "POPULATE", strconv.Itoa(keys), "filler", "16"); out != "OK" {
		t.Fatalf("DEBUG POPULATE: %s", out)
	}
	if out := run("SAVE"); out != "OK" {
		t.Fatalf("SAVE: %s", out)
	}
}

// StartRedisWith is StartRedis with extra redis-server arguments after
// the secured deployment's (a later argument overrides an earlier one).
// With wait false it returns once the process runs, without waiting for
// Redis to answer: for a test that needs Redis still loading its data.
func StartRedisWith(t testing.TB, port int, dir string, wait bool, extra ...string) (url string, p *Proc) {
	t.Helper()
	s := redisServer(t, port, dir)
	cmd, err := s.Command()
	if err != nil {
		t.Fatal(err)
	}
	p = Start(t, "redis-server", cmd.Path, append(cmd.Args[1:], extra...)...)
	if wait {
		if err := s.Wait(2 * time.Minute); err != nil {
			t.Fatalf("redis-server did not start: %v\n%s", err, p.Output())
		}
	}
	return s.URL(), p
}

// RedisLoading reports whether the secured Redis on port answers LOADING:
// it is still reading its data set into memory.
func RedisLoading(t testing.TB, port int, dir string) bool {
	t.Helper()
	s := redisServer(t, port, dir)
	rdb, err := redisconn.New(s.URL(), s.Options(redistest.Inspector))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = rdb.Ping(ctx).Err()
	return err != nil && strings.HasPrefix(err.Error(), "LOADING ")
}
