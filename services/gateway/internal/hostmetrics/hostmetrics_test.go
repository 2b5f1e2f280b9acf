package hostmetrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	f, err := os.Open("testdata/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseStat(f)
	if err != nil {
		t.Fatal(err)
	}
	// busy = user+nice+system+irq+softirq+steal = 200; total adds idle and iowait.
	if got != (CPUTimes{Busy: 200, Total: 1000}) {
		t.Fatalf("got %+v", got)
	}
	for _, bad := range []string{"intr 1\n", "cpu 1 2 x 4 5\n", ""} {
		if _, err := ParseStat(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	f, err := os.Open("testdata/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseMeminfo(f)
	if err != nil {
		t.Fatal(err)
	}
	if got != (Memory{Total: 8000000 * 1024, Used: 2000000 * 1024}) {
		t.Fatalf("got %+v", got)
	}
	if _, err := ParseMeminfo(strings.NewReader("MemTotal: 5 kB\n")); err == nil {
		t.Fatal("meminfo without MemAvailable accepted")
	}
}

func TestUtilization(t *testing.T) {
	tests := []struct {
		prev, cur CPUTimes
		want      float64
	}{
		{CPUTimes{0, 0}, CPUTimes{200, 1000}, 0.2},
		{CPUTimes{200, 1000}, CPUTimes{300, 1100}, 1},
		{CPUTimes{200, 1000}, CPUTimes{200, 1000}, 0},
		{CPUTimes{200, 1000}, CPUTimes{250, 1200}, 0.25},
	}
	for _, tt := range tests {
		if got := Utilization(tt.prev, tt.cur); got != tt.want {
			t.Errorf("Utilization(%+v, %+v) = %v, want %v", tt.prev, tt.cur, got, tt.want)
		}
	}
}

func TestSamplerOnFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", "cpu 100 0 100 800 0 0 0 0\n")
	write("meminfo", "MemTotal: 100 kB\nMemAvailable: 25 kB\n")
	s := &Sampler{Root: dir}
	if u, err := s.CPU(); err != nil || u != 0.2 {
		t.Fatalf("first reading %v, %v; want 0.2 (since boot)", u, err)
	}
	write("stat", "cpu 150 0 150 900 0 0 0 0\n")
	if u, err := s.CPU(); err != nil || u != 0.5 {
		t.Fatalf("second reading %v, %v; want 0.5", u, err)
	}
	if m, err := s.Memory(); err != nil || m != (Memory{Total: 102400, Used: 76800}) {
		t.Fatalf("memory %+v, %v", m, err)
	}
	// The real machine's files parse.
	if _, err := (&Sampler{}).CPU(); err != nil {
		t.Fatalf("/proc/stat: %v", err)
	}
	if m, err := (&Sampler{}).Memory(); err != nil || m.Total == 0 || m.Used > m.Total {
		t.Fatalf("/proc/meminfo: %+v, %v", m, err)
	}
}
