package respcache

import (
	"container/list"
	"time"
)

// entryOverhead is what an entry costs the local cache beyond its value:
// its key, list element and map slot, counted against the size so that
// many tiny entries cannot exceed it.
const entryOverhead = 128

// LRU is the local cache's core: entries by key, bounded by the bytes of
// their values (plus entryOverhead each), the least recently used evicted
// first, each with an optional expiry. It is not safe for concurrent use
// and reads no clock: the caller passes the time.
type LRU struct {
	limit int64
	used  int64
	ll    *list.List // front: most recently used
	items map[Key]*list.Element
}

type lruEntry struct {
	key     Key
	tag     string // the model, for Drop
	value   []byte
	expires time.Time // zero: never
}

// NewLRU returns an empty LRU holding at most limit bytes.
func NewLRU(limit int64) *LRU {
	return &LRU{limit: limit, ll: list.New(), items: map[Key]*list.Element{}}
}

// Cost is what an entry of n value bytes counts against the limit.
func Cost(n int) int64 { return int64(n) + entryOverhead }

// Get returns the value under k, unless it expired by now (then it is
// removed), and marks it most recently used.
func (c *LRU) Get(k Key, now time.Time) ([]byte, bool) {
	el, ok := c.items[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*lruEntry)
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.remove(el)
		return nil, false
	}
	c.ll.MoveToFront(el)
	return e.value, true
}

// Add puts value under k, tagged, expiring ttl after now (never when ttl
// is 0), and evicts least recently used entries until the cache fits. A
// value larger than the whole cache is not kept. It returns how many
// entries were evicted.
func (c *LRU) Add(k Key, tag string, value []byte, now time.Time, ttl time.Duration) (evicted int) {
	cost := Cost(len(value))
	if cost > c.limit {
		if el, ok := c.items[k]; ok {
			c.remove(el)
		}
		return 0
	}
	var expires time.Time
	if ttl > 0 {
		expires = now.Add(ttl)
	}
	if el, ok := c.items[k]; ok {
		e := el.Value.(*lruEntry)
		c.used += cost - Cost(len(e.value))
		e.value, e.tag, e.expires = value, tag, expires
		c.ll.MoveToFront(el)
	} else {
		c.items[k] = c.ll.PushFront(&lruEntry{key: k, tag: tag, value: value, expires: expires})
		c.used += cost
	}
	for c.used > c.limit {
		c.remove(c.ll.Back())
		evicted++
	}
	return evicted
}

// Drop removes every entry tagged tag and returns how many there were.
func (c *LRU) Drop(tag string) int {
	n := 0
	for el := c.ll.Front(); el != nil; {
		next := el.Next()
		if el.Value.(*lruEntry).tag == tag {
			c.remove(el)
			n++
		}
		el = next
	}
	return n
}

// Len is the number of entries.
func (c *LRU) Len() int { return c.ll.Len() }

// Used is the bytes the entries count against the limit.
func (c *LRU) Used() int64 { return c.used }

func (c *LRU) remove(el *list.Element) {
	e := el.Value.(*lruEntry)
	c.ll.Remove(el)
	delete(c.items, e.key)
	c.used -= Cost(len(e.value))
}
