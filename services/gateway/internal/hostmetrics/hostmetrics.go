// Package hostmetrics reads the machine figures behind Triton's CPU
// metrics (nv_cpu_utilization, nv_cpu_memory_total_bytes,
// nv_cpu_memory_used_bytes) from Linux's /proc: the CPU time counters of
// /proc/stat and the memory sizes of /proc/meminfo.
package hostmetrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// CPUTimes are the aggregate CPU time counters of /proc/stat, in clock
// ticks: busy is everything but idle and iowait.
type CPUTimes struct{ Busy, Total uint64 }

// ParseStat reads the first "cpu" line of /proc/stat.
func ParseStat(r io.Reader) (CPUTimes, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var t CPUTimes
		for i, s := range f[1:] {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return CPUTimes{}, fmt.Errorf("hostmetrics: /proc/stat field %d: %w", i+1, err)
			}
			// guest and guest_nice (fields 9 and 10) are already counted
			// in user and nice.
			if i >= 8 {
				break
			}
			t.Total += n
			if i != 3 && i != 4 { // idle, iowait
				t.Busy += n
			}
		}
		return t, nil
	}
	if err := sc.Err(); err != nil {
		return CPUTimes{}, err
	}
	return CPUTimes{}, errors.New("hostmetrics: no cpu line in /proc/stat")
}

// Memory is the machine's RAM in bytes: used is total less what is
// available (MemAvailable).
type Memory struct{ Total, Used uint64 }

// ParseMeminfo reads /proc/meminfo.
func ParseMeminfo(r io.Reader) (Memory, error) {
	var total, avail uint64
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 2 && f[2] == "kB" {
			n *= 1024
		}
		switch f[0] {
		case "MemTotal:":
			total, haveTotal = n, true
		case "MemAvailable:":
			avail, haveAvail = n, true
		}
	}
	if !haveTotal || !haveAvail {
		return Memory{}, errors.New("hostmetrics: /proc/meminfo lacks MemTotal or MemAvailable")
	}
	if avail > total {
		avail = total
	}
	return Memory{Total: total, Used: total - avail}, nil
}

// Utilization is the busy share of CPU time between two readings, from 0
// to 1; 0 when no time passed.
func Utilization(prev, cur CPUTimes) float64 {
	if cur.Total <= prev.Total || cur.Busy < prev.Busy {
		return 0
	}
	u := float64(cur.Busy-prev.Busy) / float64(cur.Total-prev.Total)
	return min(max(u, 0), 1)
}

// Sampler reports CPU utilization over the time since its previous
// reading (since boot for the first), as Triton reports it over its
// metrics interval.
type Sampler struct {
	// Root is where proc lives; "" is "/proc".
	Root string

	mu   sync.Mutex
	prev CPUTimes
}

func (s *Sampler) open(name string) (*os.File, error) {
	root := s.Root
	if root == "" {
		root = "/proc"
	}
	return os.Open(root + "/" + name)
}

// CPU returns the utilization since the previous call.
func (s *Sampler) CPU() (float64, error) {
	f, err := s.open("stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	cur, err := ParseStat(f)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := Utilization(s.prev, cur)
	s.prev = cur
	return u, nil
}

// Memory reads the machine's memory.
func (s *Sampler) Memory() (Memory, error) {
	f, err := s.open("meminfo")
	if err != nil {
		return Memory{}, err
	}
	defer f.Close()
	return ParseMeminfo(f)
}
