// Package ratelimit is Triton's rate limiter (core src/rate_limiter.cc) as
// functions of state: the resources an executor has, the instances that
// need them, and the order in which waiting executions get them. It does
// no I/O and starts no goroutine; the executor calls it under its own lock
// and wakes the executions it grants.
//
// With --rate-limit execution_count, every execution of an instance first
// asks for the resources its instance_group's rate_limiter lists, and runs
// once they are allocated to it; they return to the pool when it ends.
// Resources are per device (an instance takes them from its own device's
// copies) unless the model configuration marks them global (one pool for
// all devices). How many copies there are is, for each resource, the
// largest count any registered instance asks for, unless
// --rate-limit-resource gives the counts: then a resource it does not name
// has none, and an instance asking for more than there is fails to
// register with Triton's message ("Resource count for ... is limited to
// ..."), which fails its model's load.
//
// Waiting executions are served in the order of their instance's scaled
// priority, the executions it has run times its priority (0 counts as 1):
// an instance of priority 2 gets half the turns of one of priority 1. The
// first in that order is served before any other: when its resources are
// not free, the others wait too, as in Triton, so that a large request is
// not starved by smaller ones. Ties go to the earlier request.
//
// The limits are an executor's, as Triton's are a server's: executors do
// not share their pools.
package ratelimit
