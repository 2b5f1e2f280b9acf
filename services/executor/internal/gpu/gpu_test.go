package gpu

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:3b:00.0":     "00000000:3B:00.0",
		"00000000:3B:00.0": "00000000:3B:00.0",
		"garbage":          "GARBAGE",
	} {
		if got := normalizeBusID(in); got != want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWithoutGPU runs where there is no GPU (CI, this repository's
// development machines): every entry point reports ErrNoGPU, again and
// again, and nothing crashes.
func TestWithoutGPU(t *testing.T) {
	if _, err := Load(); err == nil {
		t.Skip("a CUDA driver and device are present; TestIPCAcrossProcesses covers this machine")
	}
	for range 3 {
		d, err := Load()
		if d != nil || !errors.Is(err, ErrNoGPU) {
			t.Fatalf("Load: %v, %v; want ErrNoGPU", d, err)
		}
		devs, err := Discover()
		if err == nil && len(devs) > 0 {
			t.Logf("NVML sees %d devices but the CUDA driver does not load: %v", len(devs), devs)
			continue
		}
		if !errors.Is(err, ErrNoGPU) {
			t.Fatalf("Discover: %v, %v; want ErrNoGPU", devs, err)
		}
	}
	t.Logf("no GPU, as expected: %v", func() error { _, err := Load(); return err }())
}

// The exporter is this test binary run again: it allocates device memory,
// fills it, prints the IPC handle, and after the parent has written the
// second half checks what it finds there. cuIpcOpenMemHandle refuses
// handles of its own process, so a second process is the only real test.
const exporterEnv = "NEREID_GPU_TEST_EXPORTER"

func TestMain(m *testing.M) {
	if os.Getenv(exporterEnv) != "" {
		os.Exit(exporter())
	}
	os.Exit(m.Run())
}

const ipcSize = 1 << 20

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*7 + seed
	}
	return b
}

func exporter() int {
	d, err := Load()
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	m, err := d.Alloc(0, ipcSize)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer m.Free()
	if err := m.Write(0, pattern(ipcSize/2, 1)); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("HANDLE", base64.StdEncoding.EncodeToString(m.Handle))
	// Wait for the parent to write the second half.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	got := make([]byte, ipcSize/2)
	if err := m.Read(got, ipcSize/2); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	if !bytes.Equal(got, pattern(ipcSize/2, 2)) {
		fmt.Println("ERR second half differs")
		return 1
	}
	fmt.Println("OK")
	return 0
}

// TestIPCAcrossProcesses needs an NVIDIA GPU: a second process exports a
// cudaIpcMemHandle_t; this one opens it, checks the allocation size, reads
// what the exporter wrote and writes back.
func TestIPCAcrossProcesses(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if devs, err := Discover(); err != nil {
		t.Errorf("the CUDA driver loads but NVML discovery fails: %v", err)
	} else {
		t.Logf("GPUs: %+v", devs)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), exporterEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HANDLE ") {
		t.Fatalf("exporter: %q %v", line, err)
	}
	handle, err := base64.StdEncoding.DecodeString(strings.TrimSpace(strings.TrimPrefix(line, "HANDLE ")))
	if err != nil || len(handle) != HandleSize {
		t.Fatalf("handle: %v (%d bytes)", err, len(handle))
	}
	m, err := d.OpenIPC(0, handle)
	if err != nil {
		t.Fatalf("OpenIPC: %v", err)
	}
	if m.Size < ipcSize {
		t.Fatalf("allocation size %d, want >= %d", m.Size, ipcSize)
	}
	got := make([]byte, ipcSize/2)
	if err := m.CopyToHost(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(ipcSize/2, 1)) {
		t.Fatal("first half differs from what the exporter wrote")
	}
	if err := m.CopyFromHost(ipcSize/2, pattern(ipcSize/2, 2)); err != nil {
		t.Fatal(err)
	}
	if err := m.CopyFromHost(m.Size, []byte{1}); err == nil {
		t.Fatal("a copy past the allocation was allowed")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	line, _ = r.ReadString('\n')
	if strings.TrimSpace(line) != "OK" {
		t.Fatalf("exporter: %q", line)
	}
	_ = cmd.Wait()
	if _, err := d.OpenIPC(0, make([]byte, HandleSize)); err == nil {
		t.Fatal("a zero handle opened")
	}
}
