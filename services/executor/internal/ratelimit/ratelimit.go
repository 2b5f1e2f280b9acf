package ratelimit

import (
	"cmp"
	"maps"
	"slices"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Need is one resource of an instance's rate_limiter: Count copies of
// resource Name, from the instance's device or, Global, from the one pool
// all devices share.
type Need struct {
	Name   string
	Count  int
	Global bool
}

// Key names one pool: resource Name on Device, or Global.
type Key struct {
	Name   string
	Device int
}

// Instance is a registered instance.
type Instance uint64

// Ticket is one execution's request for its instance's resources, from
// Request until Release (or Withdraw).
type Ticket uint64

// Limiter is the resource pools of one executor and the executions that
// wait for them. It is not safe for concurrent use: its caller serializes
// the calls.
type Limiter struct {
	// explicit are the --rate-limit-resource counts by key, the last given
	// for a key winning (Device EveryDevice: every device).
	explicit map[Key]int
	insts    map[Instance]*instance
	last     Instance
	// limits are the copies of each resource there are; held those
	// allocated to executions.
	limits map[Key]int
	held   map[Key]int
	// waiting are the executions waiting, in the order they asked; granted
	// those holding their resources.
	waiting []waiter
	granted map[Ticket]Instance
	tickets Ticket
}

type instance struct {
	needs map[Key]int
	// priority is the rate_limiter's, 0 read as 1; executions counts the
	// executions released, as Triton's exec_count.
	priority, executions uint64
}

type waiter struct {
	t  Ticket
	in Instance
}

// New returns a limiter with the counts of --rate-limit-resource (none:
// each resource has as many copies as the instance asking most for it).
func New(explicit []Resource) *Limiter {
	l := &Limiter{
		explicit: map[Key]int{},
		insts:    map[Instance]*instance{},
		limits:   map[Key]int{},
		held:     map[Key]int{},
		granted:  map[Ticket]Instance{},
	}
	for _, r := range explicit {
		l.explicit[Key{r.Name, r.Device}] = r.Count
	}
	return l
}

// Register adds an instance on device that needs needs (a name listed
// twice: the last count) and has rate_limiter priority priority. The
// limits are computed again with it; when they cannot hold it (the counts
// given do not suffice, or a resource is both global and per device) it is
// not added and the error is Triton's, INVALID_ARG.
func (l *Limiter) Register(device int, needs []Need, priority uint32) (Instance, error) {
	in := &instance{needs: map[Key]int{}, priority: uint64(max(priority, 1))}
	for _, n := range needs {
		k := Key{n.Name, device}
		if n.Global {
			k.Device = Global
		}
		in.needs[k] = n.Count
	}
	l.last++
	id := l.last
	l.insts[id] = in
	limits, err := l.computeLimits()
	if err != nil {
		delete(l.insts, id)
		return 0, err
	}
	l.limits = limits
	return id, nil
}

// Unregister removes an instance: the resources its executions hold
// return to the pools, the limits are computed again without it, and the
// executions it still had waiting are granted (they hold nothing, and
// their Release does nothing), so that nothing waits for an instance that
// is gone. It returns every execution granted by the change.
func (l *Limiter) Unregister(id Instance) []Ticket {
	in := l.insts[id]
	if in == nil {
		return nil
	}
	var out []Ticket
	l.waiting = slices.DeleteFunc(l.waiting, func(w waiter) bool {
		if w.in == id {
			out = append(out, w.t)
			return true
		}
		return false
	})
	for t, gi := range l.granted {
		if gi == id {
			l.give(in)
			delete(l.granted, t)
		}
	}
	delete(l.insts, id)
	if limits, err := l.computeLimits(); err == nil { // fewer instances never fail
		l.limits = limits
	}
	return append(out, l.grant()...)
}

// Request asks for the resources of one execution of instance id. It
// returns the execution's ticket and every execution granted now, t among
// them when its resources were free and nothing came before it. An
// instance that is not registered needs nothing.
func (l *Limiter) Request(id Instance) (t Ticket, granted []Ticket) {
	l.tickets++
	t = l.tickets
	l.waiting = append(l.waiting, waiter{t, id})
	return t, l.grant()
}

// Release ends the execution of ticket t: its resources return to the
// pools, its instance counts one more execution, and the executions that
// now fit are granted and returned.
func (l *Limiter) Release(t Ticket) []Ticket {
	id, ok := l.granted[t]
	if !ok {
		return nil
	}
	delete(l.granted, t)
	if in := l.insts[id]; in != nil {
		l.give(in)
		in.executions++
	}
	return l.grant()
}

// Withdraw takes back the request of ticket t, which will not execute (its
// caller stopped waiting): a waiting one leaves the queue, a granted one
// returns its resources without counting as an execution. The executions
// this lets go first are granted and returned.
func (l *Limiter) Withdraw(t Ticket) []Ticket {
	if id, ok := l.granted[t]; ok {
		delete(l.granted, t)
		if in := l.insts[id]; in != nil {
			l.give(in)
		}
		return l.grant()
	}
	l.waiting = slices.DeleteFunc(l.waiting, func(w waiter) bool { return w.t == t })
	return l.grant()
}

// Limits returns how many copies of each resource there are.
func (l *Limiter) Limits() map[Key]int { return maps.Clone(l.limits) }

// Held returns how many copies of each resource executions hold.
func (l *Limiter) Held() map[Key]int {
	out := map[Key]int{}
	for k, n := range l.held {
		if n != 0 {
			out[k] = n
		}
	}
	return out
}

// Waiting returns how many executions wait for their resources.
func (l *Limiter) Waiting() int { return len(l.waiting) }

// grant allocates their resources to the waiting executions, first in
// order first, while the first one's resources are free, and returns
// those granted.
func (l *Limiter) grant() []Ticket {
	var out []Ticket
	for len(l.waiting) > 0 {
		i := l.first()
		w := l.waiting[i]
		in := l.insts[w.in]
		if in != nil {
			if !l.fits(in) {
				break
			}
			for k, n := range in.needs {
				l.held[k] += n
			}
		}
		l.waiting = slices.Delete(l.waiting, i, i+1)
		l.granted[w.t] = w.in
		out = append(out, w.t)
	}
	return out
}

// first is the index of the waiting execution served next: the lowest
// scaled priority (executions times priority, Triton's ScaledPriority),
// then the earliest request.
func (l *Limiter) first() int {
	best, bestScore := 0, uint64(0)
	for i, w := range l.waiting {
		score := uint64(0) // an instance gone needs nothing: it goes first
		if in := l.insts[w.in]; in != nil {
			score = in.executions * in.priority
		}
		if i == 0 || score < bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// fits reports whether the pools hold in's resources now.
func (l *Limiter) fits(in *instance) bool {
	for k, n := range in.needs {
		if l.held[k]+n > l.limits[k] {
			return false
		}
	}
	return true
}

// give returns in's resources to the pools.
func (l *Limiter) give(in *instance) {
	for k, n := range in.needs {
		l.held[k] -= n
	}
}

// computeLimits is Triton's ResourceManager::UpdateResourceLimits: each
// resource has the largest count a registered instance asks for; with
// --rate-limit-resource counts, the count given instead (a global
// resource takes the largest given for its name on any device; a device's
// resource the one given for the device or for every device, whichever is
// larger; a resource not given has none), and a count given below what an
// instance asks for is an error. A resource both global and per device is
// an error too. Keys are visited global first, then by device and name,
// so that the error named is always the same.
func (l *Limiter) computeLimits() (map[Key]int, error) {
	limits := map[Key]int{}
	for _, in := range l.insts {
		for k, n := range in.needs {
			if have, ok := limits[k]; !ok || n > have {
				limits[k] = n
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(limits), func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Name, b.Name))
	})
	if len(l.explicit) > 0 {
		for _, k := range keys {
			given := 0
			for e, n := range l.explicit {
				if e.Name == k.Name && (k.Device == Global || e.Device == EveryDevice || e.Device == k.Device) {
					given = max(given, n)
				}
			}
			if given < limits[k] {
				return nil, tritonerr.InvalidArgf("Resource count for \"%s\" is limited to %d which will prevent scheduling of one or more model instances, the minimum required count is %d", k.Name, given, limits[k])
			}
			limits[k] = given
		}
	}
	for _, g := range keys {
		if g.Device != Global {
			continue
		}
		for _, k := range keys {
			if k.Device != Global && k.Name == g.Name {
				return nil, tritonerr.InvalidArgf("Resource \"%s\" is present as both global and device-specific resource in the model configuration.", k.Name)
			}
		}
	}
	return limits, nil
}
