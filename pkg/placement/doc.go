// Package placement decides which executors hold which models, as pure
// logic on the model of pkg/seqbatch: a Planner is told what the executors
// advertise (capacity, GPU and its memory, the models their repositories
// have and the models they hold, with each one's measured footprint and
// GPU footprint, last use and requests in flight), which models the
// cluster serves (footprint hints, min and max replicas, GPU kind,
// pinned), and the demand for models placed nowhere; Plan, given the
// current time, returns the loads and unloads to perform, each with its
// reason, and the models it cannot place with why.
// It holds no goroutines, timers or connections; the placement controller
// (services/sequence-router/placement) performs its decisions over the bus
// and reports their outcomes back (Done).
//
// # Use
//
//	p := placement.NewPlanner(placement.Config{})
//	p.SetModels([]placement.Model{{Name: "simple"}})
//	p.Observe(now, placement.Executor{ID: "e1", Node: "n1", Capacity: placement.Capacity{Slots: 3}, ...})
//	plan := p.Plan(now)            // loads and unloads, with reasons
//	p.Done(now, plan.Actions[0], err) // after performing one
//	p.Demand(now, "simple")        // a request found it placed nowhere
//	p.Gone(now, "e1")              // the executor stopped heartbeating
//	p.SetPins(map[string][]string{"simple": {"e2"}}) // the operator's pins
//
// # The rules
//
//   - A model is wanted on MinReplicas executors (default 1) and never on
//     more than MaxReplicas (default: no bound). Replicas go first to nodes
//     holding none of the model's replicas, then by best fit: the executor
//     left with the least free capacity that still fits the model, so large
//     models find room later.
//   - Capacity is bytes (the sum of the footprints held), slots (the count
//     of models held), or both; an executor that advertises neither is not
//     bounded. A model's footprint is the largest an executor measured for
//     it, remembered after it unloads, else its configuration's hint, else
//     Config.DefaultFootprint.
//   - GPU memory is a capacity of its own: an executor with a GPU holds
//     models whose GPU footprints (the largest GPU memory growth an
//     executor measured for the model, else its nereid_gpu_footprint hint,
//     else 0) sum to at most its GPUs' memory (Executor.GPUMemory, all its
//     GPUs together). A model with no GPU footprint takes no GPU room; best
//     fit weighs GPU room first for a model that takes some, and an
//     eviction for one frees GPU memory as it frees slots and bytes,
//     passing over models that would free nothing lacking.
//   - A model whose instance_group asks for KIND_GPU is placed only on
//     executors with a GPU; only executors whose repository has the model
//     can load it; draining executors receive nothing, and their replicas
//     do not count, so that their models are placed elsewhere before they
//     stop.
//   - Without demand, models are placed only in free capacity: the planner
//     never evicts a model to place one nobody asked for (that would
//     thrash). A model with demand (Demand: a request found it placed
//     nowhere) is placed first, and when no executor has room, the least
//     recently used models of one executor are evicted to make room: never
//     a model with requests in flight, never a pinned one, never a sequence
//     model, never one loaded or used within Config.MinResidency, never
//     another model with demand.
//   - Scaling by load (Config.ScaleUpPending > 0): a model whose requests
//     in flight per replica stay at or above the threshold for
//     Config.ScaleUpAfter gets one more replica, in free capacity only,
//     up to its max_replicas; a replica beyond min_replicas idle for
//     Config.ScaleDownAfter is unloaded (not a sequence model's).
//   - Pins (SetPins, the admin API's PinModel): the operator pins a model
//     to executors; it is loaded on each (evicting there as for a demand
//     when it must, before any other model short of its replicas is
//     placed) and never unloaded from them: not evicted, not scaled down,
//     not even above its max_replicas. A pin to an executor that is not
//     there, drains, cannot load the model or failed to, waits, and is
//     listed among the waiting models with why.
//   - A load or unload in flight counts as done until its outcome arrives
//     (Done) or Config.ActionTimeout passes; a load that failed on an
//     executor is not tried there again for Config.RetryAfter.
package placement
