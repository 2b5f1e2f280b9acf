package executor

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
	"github.com/nereid-io/nereid/services/executor/internal/ratelimit"
)

// Triton's rate limiter (--rate-limit execution_count): every execution of
// every instance of this executor waits for the resources its instance
// group's rate_limiter lists, granted in the order of internal/ratelimit,
// and gives them back when the backend's Execute returns. The wait sits in
// front of the backend's Execute, so that every path that executes (the
// dynamic batcher, the sequence runner, warmup) waits the same way, as in
// Triton. The limits are this executor's: executors do not share pools,
// as Triton servers do not.

// RateLimitMode is tritonserver's --rate-limit: RateLimitOff (the default)
// or RateLimitExecutionCount.
type RateLimitMode = ratelimit.Mode

// The --rate-limit modes.
const (
	RateLimitOff            = ratelimit.Off
	RateLimitExecutionCount = ratelimit.ExecutionCount
)

// RateLimitResource is one --rate-limit-resource: Count copies of resource
// Name on Device, or on every device when Device is -1.
type RateLimitResource = ratelimit.Resource

// ParseRateLimit reads --rate-limit ("execution_count" or "off") with
// tritonserver's message.
func ParseRateLimit(s string) (RateLimitMode, error) { return ratelimit.ParseMode(s) }

// ParseRateLimitResource reads one --rate-limit-resource
// ("<resource_name>:<count>[:<device>]") with tritonserver's messages.
func ParseRateLimitResource(s string) (RateLimitResource, error) {
	return ratelimit.ParseResource(s)
}

// RateLimitFlags are tritonserver's --rate-limit and repeatable
// --rate-limit-resource, for the mains that run an executor.
type RateLimitFlags struct {
	Mode      RateLimitMode
	Resources []RateLimitResource
}

// Register defines the flags on fs.
func (f *RateLimitFlags) Register(fs *flag.FlagSet) {
	fs.Func("rate-limit", `rate limiting: "off" (the default) runs an execution as soon as an instance is free; "execution_count" makes each execution wait for the resources its instance group's rate_limiter lists, instances served in the order of their execution count times their priority. The resources are this executor's, as tritonserver's are its server's`,
		func(v string) (err error) {
			f.Mode, err = ParseRateLimit(v)
			return err
		})
	fs.Func("rate-limit-resource", "the copies of a rate limiter resource this executor has: <resource_name>:<count>:<device>, or <resource_name>:<count> for every device (repeatable; the device is ignored for a resource the models mark global). Once given, a resource not given has none. Default: the most any loaded instance asks for",
		func(v string) error {
			r, err := ParseRateLimitResource(v)
			if err == nil {
				f.Resources = append(f.Resources, r)
			}
			return err
		})
}

// rateLimiter is the executor's limiter; nil when --rate-limit is off.
type rateLimiter struct {
	log *slog.Logger

	mu   sync.Mutex
	core *ratelimit.Limiter
	// wake holds a channel for each execution waiting, closed when it is
	// granted.
	wake map[ratelimit.Ticket]chan struct{}
	// versions are the registered instances of each model version.
	versions map[*modelVersion][]ratelimit.Instance
}

// newRateLimiter returns the limiter of cfg's --rate-limit, nil when off.
func newRateLimiter(cfg Config, log *slog.Logger) *rateLimiter {
	if cfg.RateLimit != RateLimitExecutionCount {
		if len(cfg.RateLimitResources) > 0 {
			log.Warn("--rate-limit-resource has no effect while --rate-limit is off")
		}
		return nil
	}
	return &rateLimiter{
		log: log, core: ratelimit.New(cfg.RateLimitResources),
		wake: map[ratelimit.Ticket]chan struct{}{}, versions: map[*modelVersion][]ratelimit.Instance{},
	}
}

// limit registers instance info of mv with the limiter and returns bi
// wrapped so that its executions wait for their resources; with the
// limiter off, bi itself. It fails with Triton's message when the
// instance's needs cannot be met (--rate-limit-resource counts too low, a
// resource both global and per device), which fails the load.
func (r *rateLimiter) limit(mv *modelVersion, info backend.InstanceInfo, bi backend.Instance) (backend.Instance, error) {
	if r == nil {
		return bi, nil
	}
	var cfg *inference.ModelRateLimiter // nil: no resources, priority 1
	if groups := mv.cfg.GetInstanceGroup(); info.Group < len(groups) {
		cfg = groups[info.Group].GetRateLimiter()
	}
	var needs []ratelimit.Need
	for _, res := range cfg.GetResources() {
		needs = append(needs, ratelimit.Need{Name: res.GetName(), Count: int(res.GetCount()), Global: res.GetGlobal()})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	id, err := r.core.Register(int(info.DeviceID), needs, cfg.GetPriority())
	if err != nil {
		return nil, err
	}
	r.versions[mv] = append(r.versions[mv], id)
	r.logLimits()
	return &limitedInstance{Instance: bi, r: r, id: id, model: mv.name}, nil
}

// unregister removes mv's instances: the limits no longer count them.
func (r *rateLimiter) unregister(mv *modelVersion) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ids, ok := r.versions[mv]
	if !ok {
		return
	}
	delete(r.versions, mv)
	for _, id := range ids {
		r.wakeUp(r.core.Unregister(id))
	}
	r.logLimits()
}

// acquire waits until the resources of an execution of instance id are
// allocated to it and returns its ticket; when ctx ends first, it gives
// the request up and fails.
func (r *rateLimiter) acquire(ctx context.Context, id ratelimit.Instance, model string) (ratelimit.Ticket, error) {
	r.mu.Lock()
	t, granted := r.core.Request(id)
	if slices.Contains(granted, t) {
		r.wakeUp(granted)
		r.mu.Unlock()
		return t, nil
	}
	ch := make(chan struct{})
	r.wake[t] = ch
	r.wakeUp(granted)
	r.mu.Unlock()
	select {
	case <-ch:
		return t, nil
	case <-ctx.Done():
	}
	r.mu.Lock()
	delete(r.wake, t)
	r.wakeUp(r.core.Withdraw(t)) // granted meanwhile or not, it will not run
	r.mu.Unlock()
	return 0, tritonerr.Unavailablef("the execution of model '%s' was cancelled while it waited for its rate limiter resources: %v", model, ctx.Err())
}

// release ends execution t: its resources go to the executions waiting.
func (r *rateLimiter) release(t ratelimit.Ticket) {
	r.mu.Lock()
	r.wakeUp(r.core.Release(t))
	r.mu.Unlock()
}

// wakeUp lets the granted executions that wait go; r.mu must be held.
func (r *rateLimiter) wakeUp(granted []ratelimit.Ticket) {
	for _, t := range granted {
		if ch, ok := r.wake[t]; ok {
			delete(r.wake, t)
			close(ch)
		}
	}
}

// logLimits logs the resources there are, as Triton's verbose log does
// ("Max Resource Map"); r.mu must be held.
func (r *rateLimiter) logLimits() {
	if !r.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	limits := r.core.Limits()
	var b strings.Builder
	for _, k := range slices.SortedFunc(maps.Keys(limits), func(a, b ratelimit.Key) int {
		if a.Device != b.Device {
			return a.Device - b.Device
		}
		return strings.Compare(a.Name, b.Name)
	}) {
		device := fmt.Sprint(k.Device)
		if k.Device == ratelimit.Global {
			device = "GLOBAL"
		}
		fmt.Fprintf(&b, "[device %s: %s %d] ", device, k.Name, limits[k])
	}
	r.log.Debug("rate limiter resources", "resources", strings.TrimSpace(b.String()))
}

// allocate waits for the rate limiter resources of an execution on in and
// returns their release; an instance the limiter does not govern waits for
// nothing.
func (in *instance) allocate(ctx context.Context) (release func(), err error) {
	l, ok := in.inst.(*limitedInstance)
	if !ok {
		return func() {}, nil
	}
	t, err := l.r.acquire(ctx, l.id, l.model)
	if err != nil {
		return func() {}, err
	}
	return func() { l.r.release(t) }, nil
}

// limitedInstance is an instance whose executions wait for their rate
// limiter resources (instance.allocate, before each execution's clock
// starts; Execute, for a caller outside the execution path).
type limitedInstance struct {
	backend.Instance
	r     *rateLimiter
	id    ratelimit.Instance
	model string
}

// Execute implements backend.Instance: the backend's Execute runs once the
// execution's resources are allocated, and they are released when it
// returns (a decoupled model's later responses hold none, as in Triton).
func (l *limitedInstance) Execute(ctx context.Context, reqs []*backend.Request) error {
	t, err := l.r.acquire(ctx, l.id, l.model)
	if err != nil {
		return err
	}
	defer l.r.release(t)
	return l.Instance.Execute(ctx, reqs)
}
