package modelconfig

import (
	"strconv"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Nereid's limits on a sequence model's queues in the sequence router,
// which Triton's sequence batcher does not have (server issue #5467). The
// router serving the model enforces them for the whole cluster: one router
// leads a model at a time, and the one taking over keeps them.
const (
	// MaxSequenceBacklogParameter bounds the sequences that wait in the
	// backlog for a slot: parameters { key: "nereid_max_sequence_backlog"
	// value: { string_value: "100" } }. A START that would wait beyond it
	// is refused with UNAVAILABLE ("Exceeds maximum queue size", as
	// Triton's dynamic batcher words a full queue).
	MaxSequenceBacklogParameter = "nereid_max_sequence_backlog"
	// SequenceQueueTimeoutParameter is the longest a request of a sequence
	// may wait in the router (in the backlog for a slot, or in its slot
	// for its turn) before it fails with UNAVAILABLE ("Request timeout
	// expired", as Triton's queue policy words it):
	// parameters { key: "nereid_sequence_queue_timeout_microseconds"
	// value: { string_value: "500000" } }. A request's own timeout
	// parameter shortens it, never lengthens it.
	SequenceQueueTimeoutParameter = "nereid_sequence_queue_timeout_microseconds"
)

// MaxSequenceBacklog reads the model's "nereid_max_sequence_backlog"
// parameter: absent, empty or "0" is 0 (the router's own bound, unbounded
// by default); a whole number of sequences otherwise. Anything else, or
// the parameter on a model without sequence_batching, is an error naming
// the value.
func MaxSequenceBacklog(cfg *inference.ModelConfig) (int, error) {
	n, err := sequenceLimit(cfg, MaxSequenceBacklogParameter, "a whole number of sequences, 0 for no bound of the model's own")
	if err != nil {
		return 0, err
	}
	// More sequences than memory could hold is no bound.
	return int(min(n, uint64(maxInt))), nil
}

const maxInt = int(^uint(0) >> 1)

// SequenceQueueTimeout reads the model's
// "nereid_sequence_queue_timeout_microseconds" parameter: absent, empty or
// "0" is 0 (no timeout of the model's own); a whole number of
// microseconds otherwise, as Triton's default_timeout_microseconds.
// Anything else, or the parameter on a model without sequence_batching,
// is an error naming the value.
func SequenceQueueTimeout(cfg *inference.ModelConfig) (time.Duration, error) {
	n, err := sequenceLimit(cfg, SequenceQueueTimeoutParameter, "a whole number of microseconds, 0 for none")
	if err != nil {
		return 0, err
	}
	return Microseconds(n), nil
}

// Microseconds is n microseconds as a Duration, the longest one past the
// range of a Duration (some 292 years: forever).
func Microseconds(n uint64) time.Duration {
	const most = uint64(1<<63-1) / uint64(time.Microsecond)
	if n > most {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(n) * time.Microsecond
}

// sequenceLimit reads one of the sequence limits: a non-negative decimal
// integer in the parameter's string_value, on a sequence model only.
func sequenceLimit(cfg *inference.ModelConfig, name, expected string) (uint64, error) {
	p, ok := cfg.GetParameters()[name]
	if !ok {
		return 0, nil
	}
	v := p.GetStringValue()
	if cfg.GetSequenceBatching() == nil {
		return 0, tritonerr.InvalidArgf("model '%s' sets parameter '%s' to '%s' but has no sequence_batching: the parameter applies to the sequence router's queues only",
			cfg.GetName(), name, v)
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, tritonerr.InvalidArgf("model '%s': invalid value '%s' of parameter '%s' (expected %s)", cfg.GetName(), v, name, expected)
	}
	return n, nil
}
