package constellation

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one running process with its combined output kept for failure
// reports.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs path with args; the process is killed when the test ends and its
// output is printed if the test failed.
func Start(t testing.TB, name, path string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, cmd: exec.Command(path, args...), out: &syncBuffer{}, done: make(chan struct{})}
	var out io.Writer = p.out
	if dir := os.Getenv("NEREID_E2E_LOG_DIR"); dir != "" {
		// Kept whole on disk as well: a crash's output can outgrow what a
		// failure report shows, and the start of a traceback matters most.
		f, err := os.CreateTemp(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()+"-"+name)+"-*.log")
		if err != nil {
			t.Fatalf("keeping the output of %s: %v", name, err)
		}
		t.Cleanup(func() { _ = f.Close() })
		out = io.MultiWriter(p.out, f)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.Env = processEnv(path)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if leaked := leakedSecrets(p.Output()); len(leaked) > 0 {
			t.Errorf("%s printed secrets it was given (%v)", name, leaked)
		}
		if t.Failed() {
			t.Logf("---- %s output ----\n%s", name, p.Output())
		}
	})
	return p
}

// Pid is the process id (tests read /proc/<pid>/status for memory use).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output is everything the process has printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Kill ends the process abruptly (SIGKILL), as a crash would.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop asks the process to end (SIGTERM) and kills it after 5 s.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.Kill()
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// handedOut holds the ports FreePort returned in this process. A port is
// free only until the process it is meant for binds it, and that can be
// seconds later (a process starting under load); meanwhile the kernel
// may give the same port to the next FreePort, and two processes of one
// test would race for it.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a loopback port that was free a moment ago and that no
// earlier call in this process returned.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("no free port that was not handed out already")
	return 0
}

// Addr is "127.0.0.1:port".
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// WaitFor polls cond every 50 ms until it holds or timeout passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// WaitHTTP waits until GET url answers with want.
func WaitHTTP(url string, want int, timeout time.Duration) error {
	ok := WaitFor(timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == want
	})
	if !ok {
		return fmt.Errorf("%s did not answer %d within %v", url, want, timeout)
	}
	return nil
}
