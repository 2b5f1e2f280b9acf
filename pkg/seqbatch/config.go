package seqbatch

import (
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/modelconfig"
)

// Strategy is the sequence batcher's strategy.
type Strategy int

const (
	// Direct binds each sequence to one batch slot of one instance.
	Direct Strategy = iota
	// Oldest binds each sequence to a candidate slot of one instance and
	// batches the oldest ready requests of the candidates.
	Oldest
)

// Config is what the batcher needs from a model config, plus Nereid's own
// settings.
type Config struct {
	Model    string
	Strategy Strategy
	// SlotsPerInstance is max(1, max_batch_size) for direct,
	// max_candidate_sequences (when > 0) for oldest.
	SlotsPerInstance int
	// MaxBatch bounds an oldest batch: max(1, max_batch_size).
	MaxBatch      int
	Preferred     []int
	MaxQueueDelay time.Duration
	// Idle is max_sequence_idle_microseconds (default 1 s); any length,
	// hours included.
	Idle time.Duration
	// MaxBacklog bounds the backlog in sequences; 0 means unbounded
	// (Triton). The model parameter "nereid_max_sequence_backlog" sets it.
	MaxBacklog int
	// QueueTimeout bounds how long a request waits in the batcher, in the
	// backlog or in its slot, before it leaves in a batch; a request's own
	// Timeout shortens it. 0 means none: only Triton's backlog expiry by
	// the request's Timeout applies. The model parameter
	// "nereid_sequence_queue_timeout_microseconds" sets it.
	QueueTimeout time.Duration
	// HoldSlots and HoldBacklog are the test hook of Triton's
	// TRITONSERVER_DELAY_SCHEDULER and TRITONSERVER_BACKLOG_DELAY_SCHEDULER:
	// no batch leaves until that many requests wait in slots and in the
	// backlog; after that, never again.
	HoldSlots, HoldBacklog int
	// Durable is the model's state_durability "redis": its sequences'
	// state survives the loss of their executor, so RemoveExecutor moves
	// them to other instances instead of forgetting them.
	Durable bool
}

// ConfigFrom reads a model config (defaults filled by modelconfig).
func ConfigFrom(cfg *inference.ModelConfig) Config {
	sb := cfg.GetSequenceBatching()
	c := Config{
		Model:            cfg.GetName(),
		SlotsPerInstance: max(1, int(cfg.GetMaxBatchSize())),
		MaxBatch:         max(1, int(cfg.GetMaxBatchSize())),
		Idle:             time.Duration(sb.GetMaxSequenceIdleMicroseconds()) * time.Microsecond,
	}
	if c.Idle <= 0 {
		c.Idle = time.Duration(modelconfig.DefaultMaxSequenceIdleMicroseconds) * time.Microsecond
	}
	if o := sb.GetOldest(); o != nil {
		c.Strategy = Oldest
		if o.GetMaxCandidateSequences() > 0 {
			c.SlotsPerInstance = int(o.GetMaxCandidateSequences())
		}
		for _, p := range o.GetPreferredBatchSize() {
			c.Preferred = append(c.Preferred, int(p))
		}
		c.MaxQueueDelay = time.Duration(o.GetMaxQueueDelayMicroseconds()) * time.Microsecond
	}
	if d, err := modelconfig.StateDurability(cfg); err == nil && d == modelconfig.DurabilityRedis {
		c.Durable = true
	}
	// Both are checked when the model loads (modelconfig.Validate).
	if n, err := modelconfig.MaxSequenceBacklog(cfg); err == nil {
		c.MaxBacklog = n
	}
	if d, err := modelconfig.SequenceQueueTimeout(cfg); err == nil {
		c.QueueTimeout = d
	}
	return c
}
