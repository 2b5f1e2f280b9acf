package placement

import (
	"fmt"
	"strconv"
	"strings"
)

// Capacity is what an executor may hold: bytes of model footprint, model
// slots, or both. A zero field does not bound.
type Capacity struct {
	Bytes uint64
	Slots int
}

// Bounded reports whether c bounds anything.
func (c Capacity) Bounded() bool { return c.Bytes > 0 || c.Slots > 0 }

// String is c as ParseCapacity reads it ("slots=3,4GiB"); "unbounded"
// when c bounds nothing.
func (c Capacity) String() string {
	var parts []string
	if c.Slots > 0 {
		parts = append(parts, "slots="+strconv.Itoa(c.Slots))
	}
	if c.Bytes > 0 {
		parts = append(parts, FormatBytes(c.Bytes))
	}
	if len(parts) == 0 {
		return "unbounded"
	}
	return strings.Join(parts, ",")
}

var units = []struct {
	suffix string
	mult   uint64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseBytes reads a byte count: a plain number, or one with a unit
// (KiB, MiB, GiB, TiB as powers of 1024, KB, MB, GB, TB as powers of
// 1000, K, M, G, T as the binary ones), as in "4GiB" or "512M".
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range units {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid byte count %q: want a number with an optional unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	return uint64(n * float64(mult)), nil
}

// FormatBytes writes n with the largest binary unit it is a whole
// multiple of, so that ParseBytes reads it back exactly.
func FormatBytes(n uint64) string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatUint(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10)
}

// ParseCapacity reads --model-capacity: a byte count ("4GiB"), model slots
// ("slots=3"), or both separated by a comma ("slots=3,4GiB").
func ParseCapacity(s string) (Capacity, error) {
	var c Capacity
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if v, ok := strings.CutPrefix(part, "slots="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Capacity{}, fmt.Errorf("invalid --model-capacity %q: slots must be a positive number", s)
			}
			c.Slots = n
			continue
		}
		n, err := ParseBytes(part)
		if err != nil || n == 0 {
			return Capacity{}, fmt.Errorf("invalid --model-capacity %q: want bytes (4GiB), slots (slots=3) or both (slots=3,4GiB)", s)
		}
		c.Bytes = n
	}
	return c, nil
}
