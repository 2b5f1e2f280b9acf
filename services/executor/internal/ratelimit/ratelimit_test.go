package ratelimit

import (
	"maps"
	"slices"
	"testing"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"execution_count": ExecutionCount, "EXECUTION_COUNT": ExecutionCount, "off": Off, "Off": Off} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "on", "execution-count"} {
		if _, err := ParseMode(in); err == nil || err.Error() != "invalid argument for --rate-limit" {
			t.Errorf("ParseMode(%q): %v, want tritonserver's \"invalid argument for --rate-limit\"", in, err)
		}
	}
}

func TestParseResource(t *testing.T) {
	format := func(s string) string {
		return "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got " + s
	}
	for _, tc := range []struct {
		in   string
		want Resource
		err  string
	}{
		{in: "R1:10", want: Resource{"R1", 10, EveryDevice}},
		{in: "R2:5:0", want: Resource{"R2", 5, 0}},
		{in: "R2:8:1", want: Resource{"R2", 8, 1}},
		{in: "R:4:-1", want: Resource{"R", 4, EveryDevice}},
		{in: "R", err: format("R")},
		{in: "R:1:2:3", err: format("R:1:2:3")},
		{in: "R:x", err: "Invalid option value. Got x"},
		{in: "R:1:gpu", err: "Invalid option value. Got gpu"},
		{in: "R:99999999999", err: "Provided option value is out of bound. Got 99999999999"},
		{in: "R:-1", err: format("R:-1")},
		{in: "R:1:-2", err: format("R:1:-2")},
	} {
		got, err := ParseResource(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParseResource(%q): %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseResource(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if again, err := ParseResource(got.String()); err != nil || again != got {
			t.Errorf("ParseResource(%q.String()) = %+v, %v", tc.in, again, err)
		}
	}
}

// inst is an instance to register in a table: its device and needs.
type inst struct {
	device int
	needs  []Need
}

func need(name string, count int) Need            { return Need{Name: name, Count: count} }
func global(name string, count int) Need          { return Need{Name: name, Count: count, Global: true} }
func dev(name string, device int) Key             { return Key{name, device} }
func res(name string, count, device int) Resource { return Resource{name, count, device} }

// TestLimits checks the copies of each resource an executor has after its
// instances register, and Triton's errors, with the cases of Triton's
// rate_limiter.md and its QA (qa/L0_rate_limiter).
func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		explicit []Resource
		insts    []inst
		want     map[Key]int
		err      string // the last instance's registration error
	}{
		{
			name: "default: the most any instance asks for (rate_limiter.md)",
			insts: []inst{
				{0, []Need{need("R1", 4), need("R2", 4)}},
				{0, []Need{need("R2", 5), need("R3", 10), need("R4", 5)}},
				{0, []Need{need("R1", 1), need("R3", 7), need("R4", 2)}},
			},
			want: map[Key]int{dev("R1", 0): 4, dev("R2", 0): 5, dev("R3", 0): 10, dev("R4", 0): 5},
		},
		{
			name:     "given per device, for one device, and global (rate_limiter.md's two-device example)",
			explicit: []Resource{res("R1", 10, EveryDevice), res("R2", 5, 0), res("R2", 8, 1), res("R3", 2, EveryDevice)},
			insts: []inst{
				{0, []Need{need("R1", 1), need("R2", 1), global("R3", 1)}},
				{1, []Need{need("R1", 1), need("R2", 1), global("R3", 1)}},
			},
			want: map[Key]int{dev("R1", 0): 10, dev("R1", 1): 10, dev("R2", 0): 5, dev("R2", 1): 8, dev("R3", Global): 2},
		},
		{
			name:     "a global resource takes the largest count given on any device",
			explicit: []Resource{res("G", 3, 0), res("G", 6, 1), res("G", 4, EveryDevice)},
			insts:    []inst{{0, []Need{global("G", 1)}}},
			want:     map[Key]int{dev("G", Global): 6},
		},
		{
			name:     "a device's resource: the larger of its own and every device's",
			explicit: []Resource{res("R", 3, EveryDevice), res("R", 7, 1)},
			insts:    []inst{{0, []Need{need("R", 1)}}, {1, []Need{need("R", 1)}}},
			want:     map[Key]int{dev("R", 0): 3, dev("R", 1): 7},
		},
		{
			name:     "the last count given for a key wins",
			explicit: []Resource{res("R", 9, EveryDevice), res("R", 2, EveryDevice)},
			insts:    []inst{{0, []Need{need("R", 1)}}},
			want:     map[Key]int{dev("R", 0): 2},
		},
		{
			name:     "given below what an instance asks (L0 case 1)",
			explicit: []Resource{res("resource1", 1, EveryDevice)},
			insts:    []inst{{0, []Need{need("resource1", 4)}}},
			err:      `Resource count for "resource1" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 4`,
		},
		{
			name:     "enough for one model, not the other (L0 case 2)",
			explicit: []Resource{res("resource1", 3, EveryDevice), res("resource2", 2, EveryDevice)},
			insts: []inst{
				{0, []Need{need("resource1", 2), global("resource2", 2)}},
				{0, []Need{need("resource1", 4)}},
			},
			err: `Resource count for "resource1" is limited to 3 which will prevent scheduling of one or more model instances, the minimum required count is 4`,
		},
		{
			name:     "given for another device only: none here (L0 case 3)",
			explicit: []Resource{res("resource1", 10, 10), res("resource2", 2, EveryDevice)},
			insts:    []inst{{0, []Need{need("resource1", 4)}}},
			err:      `Resource count for "resource1" is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 4`,
		},
		{
			name:     "counts given: a resource not given has none",
			explicit: []Resource{res("other", 10, EveryDevice)},
			insts:    []inst{{0, []Need{need("R", 1)}}},
			err:      `Resource count for "R" is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 1`,
		},
		{
			name: "global and per device at once (L0 case 4)",
			insts: []inst{
				{0, []Need{need("resource1", 2), global("resource2", 2)}},
				{0, []Need{need("resource1", 2), need("resource2", 2)}},
			},
			err: `Resource "resource2" is present as both global and device-specific resource in the model configuration.`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(tc.explicit)
			var err error
			for i, in := range tc.insts {
				_, err = l.Register(in.device, in.needs, 1)
				if err != nil && i < len(tc.insts)-1 {
					t.Fatalf("instance %d: %v", i, err)
				}
			}
			if tc.err != "" {
				e := tritonerr.From(err)
				if e == nil || e.Msg != tc.err || e.Kind != tritonerr.InvalidArg {
					t.Fatalf("error %v, want INVALID_ARG %q", err, tc.err)
				}
				// The instance refused is not counted: the limits are those
				// of the others.
				if got, want := l.Limits(), limitsOf(t, tc.explicit, tc.insts[:len(tc.insts)-1]); !maps.Equal(got, want) {
					t.Fatalf("limits after the refusal %v, want %v", got, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Limits(); !maps.Equal(got, tc.want) {
				t.Fatalf("limits %v, want %v", got, tc.want)
			}
		})
	}
}

func limitsOf(t *testing.T, explicit []Resource, insts []inst) map[Key]int {
	l := New(explicit)
	for _, in := range insts {
		if _, err := l.Register(in.device, in.needs, 1); err != nil {
			t.Fatal(err)
		}
	}
	return l.Limits()
}

// TestLimitsFollowInstances: without counts given, the limits grow and
// shrink as instances come and go.
func TestLimitsFollowInstances(t *testing.T) {
	l := New(nil)
	a, _ := l.Register(0, []Need{need("R", 2)}, 1)
	b, _ := l.Register(0, []Need{need("R", 5)}, 1)
	if got := l.Limits()[dev("R", 0)]; got != 5 {
		t.Fatalf("R: %d copies, want 5", got)
	}
	l.Unregister(b)
	if got := l.Limits()[dev("R", 0)]; got != 2 {
		t.Fatalf("R after the larger instance left: %d copies, want 2", got)
	}
	l.Unregister(a)
	if got := l.Limits(); len(got) != 0 {
		t.Fatalf("limits with no instance: %v", got)
	}
}

// TestNeverExceeds drives the limiter with executions of instances of
// several sizes that request, and end in turn, in a fixed pseudo-random
// order, and checks after every step that what is held never exceeds the
// pools, and that an execution is granted whenever the first waiting one
// fits.
func TestNeverExceeds(t *testing.T) {
	l := New([]Resource{res("R", 5, EveryDevice), res("G", 3, EveryDevice)})
	var ids []Instance
	for _, in := range []inst{
		{0, []Need{need("R", 1)}},
		{0, []Need{need("R", 2)}},
		{0, []Need{need("R", 3), global("G", 1)}},
		{1, []Need{need("R", 4), global("G", 2)}},
		{1, []Need{global("G", 3)}},
		{0, nil},
	} {
		id, err := l.Register(in.device, in.needs, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	limits := l.Limits()
	running := map[Ticket]bool{}
	var seed uint32 = 1
	rnd := func(n int) int { seed = seed*1664525 + 1013904223; return int(seed>>16) % n }
	granted := 0
	for step := range 5000 {
		if len(running) > 0 && rnd(2) == 0 {
			ts := slices.Sorted(maps.Keys(running))
			tk := ts[rnd(len(ts))]
			delete(running, tk)
			for _, g := range l.Release(tk) {
				running[g] = true
				granted++
			}
		} else {
			_, gs := l.Request(ids[rnd(len(ids))])
			for _, g := range gs {
				running[g] = true
				granted++
			}
		}
		for k, n := range l.Held() {
			if n > limits[k] {
				t.Fatalf("step %d: %d of %v held, there are %d", step, n, k, limits[k])
			}
		}
		if len(running) == 0 && l.Waiting() > 0 {
			t.Fatalf("step %d: %d executions wait with nothing running", step, l.Waiting())
		}
	}
	if granted < 1000 {
		t.Fatalf("only %d executions granted in 5000 steps", granted)
	}
}

// TestPriority: two instances competing for one resource, always asking
// again as soon as they finish; one of priority 2 runs half as often as
// one of priority 1 (rate_limiter.md: "an instance with priority 2 will be
// given 1/2 the number of scheduling chances as an instance with priority
// 1"), and priority 0 counts as 1.
func TestPriority(t *testing.T) {
	for _, tc := range []struct {
		pa, pb uint32
		wantA  int // of 300 executions
	}{
		{1, 2, 200},
		{1, 1, 150},
		{0, 1, 150},
		{1, 3, 225},
	} {
		l := New(nil)
		a, _ := l.Register(0, []Need{need("R", 1)}, tc.pa)
		b, _ := l.Register(0, []Need{need("R", 1)}, tc.pb)
		who := map[Ticket]Instance{}
		ta, ga := l.Request(a)
		who[ta] = a
		tb, gb := l.Request(b)
		who[tb] = b
		running := append(ga, gb...)
		if len(running) != 1 || running[0] != ta {
			t.Fatalf("granted %v at first, want only a's %v", running, ta)
		}
		runs := map[Instance]int{}
		for range 300 {
			tk := running[0]
			in := who[tk]
			runs[in]++
			// The instance finished asks again before the release, as a
			// busy instance's next batch is ready.
			next, g := l.Request(in)
			who[next] = in
			if len(g) != 0 {
				t.Fatalf("granted %v while the resource is held", g)
			}
			running = l.Release(tk)
			if len(running) != 1 {
				t.Fatalf("granted %v after a release, want one", running)
			}
		}
		if runs[a] != tc.wantA {
			t.Errorf("priorities %d and %d: a ran %d of 300, want %d", tc.pa, tc.pb, runs[a], tc.wantA)
		}
	}
}

// TestFirstWaitsFirst: the first waiting execution in priority order that
// does not fit holds back those after it, even ones that would fit, so
// that it is not starved; it goes as soon as its resources are free.
func TestFirstWaitsFirst(t *testing.T) {
	l := New([]Resource{res("R", 4, EveryDevice)})
	big, _ := l.Register(0, []Need{need("R", 4)}, 1)
	small, _ := l.Register(0, []Need{need("R", 1)}, 1)
	other, _ := l.Register(0, []Need{need("R", 1)}, 1)

	t1, g := l.Request(small)
	if !slices.Equal(g, []Ticket{t1}) {
		t.Fatalf("small: granted %v", g)
	}
	tBig, g := l.Request(big)
	if len(g) != 0 {
		t.Fatalf("big granted %v while 1 of 4 is held", g)
	}
	// other has run no more than big (both 0 executions): big asked first.
	tOther, g := l.Request(other)
	if len(g) != 0 {
		t.Fatalf("other granted %v ahead of big, which waits first", g)
	}
	if g := l.Release(t1); !slices.Equal(g, []Ticket{tBig}) {
		t.Fatalf("after small's release granted %v, want big's %v", g, tBig)
	}
	if g := l.Release(tBig); !slices.Equal(g, []Ticket{tOther}) {
		t.Fatalf("after big's release granted %v, want other's %v", g, tOther)
	}
}

// TestWithdraw: an execution that stops waiting leaves the queue and lets
// those behind it go; one withdrawn after its grant gives its resources
// back without counting as an execution.
func TestWithdraw(t *testing.T) {
	l := New([]Resource{res("R", 2, EveryDevice)})
	a, _ := l.Register(0, []Need{need("R", 1)}, 1)
	b, _ := l.Register(0, []Need{need("R", 2)}, 1)
	c, _ := l.Register(0, []Need{need("R", 1)}, 1)
	ta, _ := l.Request(a)
	tb, _ := l.Request(b) // waits: 1 of 2 held
	tc, g := l.Request(c) // behind b
	if len(g) != 0 {
		t.Fatalf("c granted %v behind b", g)
	}
	if g := l.Withdraw(tb); !slices.Equal(g, []Ticket{tc}) {
		t.Fatalf("b withdrawn: granted %v, want c's %v", g, tc)
	}
	if g := l.Withdraw(ta); g != nil {
		t.Fatalf("a withdrawn after its grant: granted %v", g)
	}
	if got := l.Held()[dev("R", 0)]; got != 1 {
		t.Fatalf("%d of R held, want c's 1", got)
	}
	l.Release(tc)
	if got := l.Held(); len(got) != 0 {
		t.Fatalf("held after all ended: %v", got)
	}
	// a's withdrawn grant was no execution: once b's execution ends, a
	// (0 executions) goes before c (1 execution), though c asked first.
	tb2, _ := l.Request(b)
	tc2, _ := l.Request(c)
	ta2, _ := l.Request(a)
	if g := l.Release(tb2); !slices.Equal(g, []Ticket{ta2, tc2}) {
		t.Fatalf("after b's release granted %v, want a's %v then c's %v", g, ta2, tc2)
	}
}

// TestUnregisterWakes: an instance going away returns what its executions
// hold and lets its waiting executions go, and the limits shrink.
func TestUnregisterWakes(t *testing.T) {
	l := New(nil)
	a, _ := l.Register(0, []Need{need("R", 3)}, 1)
	b, _ := l.Register(0, []Need{need("R", 1)}, 1)
	ta, _ := l.Request(a)
	tb, _ := l.Request(b) // 3 of 3 held by a
	ta2, _ := l.Request(a)
	g := l.Unregister(a)
	slices.Sort(g)
	if want := []Ticket{tb, ta2}; !slices.Equal(g, want) {
		t.Fatalf("a unregistered: granted %v, want a's waiting %v and b's %v", g, ta2, tb)
	}
	if got := l.Held()[dev("R", 0)]; got != 1 {
		t.Fatalf("%d of R held, want b's 1", got)
	}
	if got := l.Limits()[dev("R", 0)]; got != 1 {
		t.Fatalf("R has %d copies without a, want 1", got)
	}
	if g := l.Release(ta); g != nil {
		t.Fatalf("release of a's old execution granted %v", g)
	}
	l.Release(ta2)
	l.Release(tb)
	if got := l.Held(); len(got) != 0 {
		t.Fatalf("held after all ended: %v", got)
	}
}
