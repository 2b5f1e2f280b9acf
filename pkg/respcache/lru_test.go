package respcache

import (
	"testing"
	"time"
)

func key(b byte) Key { var k Key; k[0] = b; return k }

func TestLRU(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		op    string // add, get, drop
		k     byte
		tag   string
		size  int
		ttl   time.Duration
		at    time.Duration // after t0
		found bool          // get: expected
	}
	cases := []struct {
		name   string
		limit  int64
		steps  []step
		len    int
		used   int64
		evicts int
	}{
		{name: "fits", limit: 3 * Cost(10), steps: []step{
			{op: "add", k: 1, size: 10}, {op: "add", k: 2, size: 10}, {op: "add", k: 3, size: 10},
			{op: "get", k: 1, found: true}, {op: "get", k: 2, found: true}, {op: "get", k: 3, found: true},
		}, len: 3, used: 3 * Cost(10)},
		{name: "evicts least recently used", limit: 3 * Cost(10), steps: []step{
			{op: "add", k: 1, size: 10}, {op: "add", k: 2, size: 10}, {op: "add", k: 3, size: 10},
			{op: "get", k: 1, found: true}, // 2 is now the least recently used
			{op: "add", k: 4, size: 10},
			{op: "get", k: 2, found: false}, {op: "get", k: 1, found: true}, {op: "get", k: 3, found: true}, {op: "get", k: 4, found: true},
		}, len: 3, used: 3 * Cost(10), evicts: 1},
		{name: "a large entry evicts several", limit: 3 * Cost(10), steps: []step{
			{op: "add", k: 1, size: 10}, {op: "add", k: 2, size: 10}, {op: "add", k: 3, size: 10},
			{op: "add", k: 4, size: 2*10 + entryOverhead},
			{op: "get", k: 1, found: false}, {op: "get", k: 2, found: false}, {op: "get", k: 3, found: true}, {op: "get", k: 4, found: true},
		}, len: 2, used: Cost(10) + Cost(2*10+entryOverhead), evicts: 2},
		{name: "larger than the cache is not kept", limit: Cost(10), steps: []step{
			{op: "add", k: 1, size: 10}, {op: "add", k: 2, size: 11},
			{op: "get", k: 1, found: true}, {op: "get", k: 2, found: false},
		}, len: 1, used: Cost(10)},
		{name: "replacing an entry counts its new size", limit: 2 * Cost(10), steps: []step{
			{op: "add", k: 1, size: 10}, {op: "add", k: 1, size: 5},
			{op: "get", k: 1, found: true},
		}, len: 1, used: Cost(5)},
		{name: "expires by TTL", limit: 10 * Cost(10), steps: []step{
			{op: "add", k: 1, size: 10, ttl: time.Second}, {op: "add", k: 2, size: 10},
			{op: "get", k: 1, at: 999 * time.Millisecond, found: true},
			{op: "get", k: 1, at: time.Second, found: false},
			{op: "get", k: 2, at: time.Hour, found: true},
		}, len: 1, used: Cost(10)},
		{name: "drop by tag", limit: 10 * Cost(10), steps: []step{
			{op: "add", k: 1, tag: "a", size: 10}, {op: "add", k: 2, tag: "b", size: 10}, {op: "add", k: 3, tag: "a", size: 10},
			{op: "drop", tag: "a"},
			{op: "get", k: 1, found: false}, {op: "get", k: 2, found: true}, {op: "get", k: 3, found: false},
		}, len: 1, used: Cost(10)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewLRU(tc.limit)
			evicts := 0
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "add":
					evicts += c.Add(key(s.k), s.tag, make([]byte, s.size), now, s.ttl)
				case "get":
					v, ok := c.Get(key(s.k), now)
					if ok != s.found {
						t.Fatalf("step %d: get %d: found %v, want %v", i, s.k, ok, s.found)
					}
					_ = v
				case "drop":
					c.Drop(s.tag)
				}
				if c.Used() > tc.limit {
					t.Fatalf("step %d: used %d over the limit %d", i, c.Used(), tc.limit)
				}
			}
			if c.Len() != tc.len || c.Used() != tc.used || evicts != tc.evicts {
				t.Errorf("len %d used %d evicted %d, want %d %d %d", c.Len(), c.Used(), evicts, tc.len, tc.used, tc.evicts)
			}
		})
	}
}
