package shm

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestInspectPermissionDenied: a region the server may not open (another
// user's object with mode 0600, as a client creates it) fails with Triton's
// message followed by why and what to do, not the bare message alone.
func TestInspectPermissionDenied(t *testing.T) {
	if os.Getenv("NEREID_SHM_PERM_KEY") != "" {
		// The child: run as another user, open the parent's region.
		err := Inspect("r", os.Getenv("NEREID_SHM_PERM_KEY"), 0, uint64(os.Getpagesize()))
		fmt.Printf("%s|%s\n", tritonerr.From(err).Kind, tritonerr.From(err).Msg)
		return
	}
	key := testKey(t)
	m, err := Create(key, os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer Unlink(key)

	var msg string
	if os.Geteuid() == 0 {
		// Root opens anything: ask as another user, in a child process
		// run from a copy of this test binary that user may execute.
		bin := copyExecutable(t, os.Args[0])
		cmd := exec.Command(bin, "-test.run=^TestInspectPermissionDenied$")
		cmd.Env = append(os.Environ(), "NEREID_SHM_PERM_KEY="+key)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child as uid 65532: %v\n%s", err, out)
		}
		line, _, _ := strings.Cut(string(out), "\n")
		kind, text, ok := strings.Cut(line, "|")
		if !ok || kind != tritonerr.Internal.String() {
			t.Fatalf("child said %q, want an INTERNAL error", out)
		}
		msg = text
	} else {
		if err := os.Chmod(Dir+key, 0); err != nil {
			t.Fatal(err)
		}
		err := Inspect("r", key, 0, uint64(os.Getpagesize()))
		wantErr(t, err, tritonerr.Internal, "Unable to open shared memory region: '"+key+"'")
		msg = tritonerr.From(err).Msg
	}
	for _, want := range []string{
		"Unable to open shared memory region: '" + key + "': permission denied",
		fmt.Sprintf("owned by uid %d", os.Getuid()),
		"NEREID_UID",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
}

func copyExecutable(t *testing.T, src string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nereid-shm-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := dir + "/shm.test"
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}
