package modelconfig

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
)

func TestSequenceLimits(t *testing.T) {
	params := func(kv ...string) map[string]*inference.ModelParameter {
		p := map[string]*inference.ModelParameter{}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i]] = &inference.ModelParameter{StringValue: kv[i+1]}
		}
		return p
	}
	sequence := func(p map[string]*inference.ModelParameter) *inference.ModelConfig {
		return &inference.ModelConfig{Name: "m", Backend: "identity", SchedulingChoice: seq(&inference.ModelSequenceBatching{}), Parameters: p}
	}
	for _, tc := range []struct {
		name    string
		cfg     *inference.ModelConfig
		backlog int
		timeout time.Duration
		err     string
	}{
		{"no parameters", sequence(nil), 0, 0, ""},
		{"both set", sequence(params(MaxSequenceBacklogParameter, "16", SequenceQueueTimeoutParameter, "250000")), 16, 250 * time.Millisecond, ""},
		{"zero and empty", sequence(params(MaxSequenceBacklogParameter, "0", SequenceQueueTimeoutParameter, "")), 0, 0, ""},
		{"timeout past a Duration", sequence(params(SequenceQueueTimeoutParameter, "18446744073709551615")), 0, time.Duration(1<<63 - 1), ""},
		{"negative backlog", sequence(params(MaxSequenceBacklogParameter, "-1")), 0, 0,
			"model 'm': invalid value '-1' of parameter 'nereid_max_sequence_backlog' (expected a whole number of sequences, 0 for no bound of the model's own)"},
		{"backlog not a number", sequence(params(MaxSequenceBacklogParameter, "ten")), 0, 0,
			"model 'm': invalid value 'ten' of parameter 'nereid_max_sequence_backlog' (expected a whole number of sequences, 0 for no bound of the model's own)"},
		{"timeout with a unit", sequence(params(SequenceQueueTimeoutParameter, "500ms")), 0, 0,
			"model 'm': invalid value '500ms' of parameter 'nereid_sequence_queue_timeout_microseconds' (expected a whole number of microseconds, 0 for none)"},
		{"timeout a fraction", sequence(params(SequenceQueueTimeoutParameter, "1.5")), 0, 0,
			"model 'm': invalid value '1.5' of parameter 'nereid_sequence_queue_timeout_microseconds' (expected a whole number of microseconds, 0 for none)"},
		{"backlog without sequence batching", &inference.ModelConfig{Name: "m", Backend: "identity", Parameters: params(MaxSequenceBacklogParameter, "4")}, 0, 0,
			"model 'm' sets parameter 'nereid_max_sequence_backlog' to '4' but has no sequence_batching: the parameter applies to the sequence router's queues only"},
		{"timeout without sequence batching", &inference.ModelConfig{Name: "m", Backend: "identity", Parameters: params(SequenceQueueTimeoutParameter, "1000")}, 0, 0,
			"model 'm' sets parameter 'nereid_sequence_queue_timeout_microseconds' to '1000' but has no sequence_batching: the parameter applies to the sequence router's queues only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, berr := MaxSequenceBacklog(tc.cfg)
			d, derr := SequenceQueueTimeout(tc.cfg)
			err := berr
			if err == nil {
				err = derr
			}
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				// Such a configuration does not load, with the same message.
				Normalize(tc.cfg)
				if verr := Validate(tc.cfg); verr == nil || verr.Error() != tc.err {
					t.Fatalf("Validate = %v, want %q", verr, tc.err)
				}
				return
			}
			if err != nil || b != tc.backlog || d != tc.timeout {
				t.Fatalf("MaxSequenceBacklog, SequenceQueueTimeout = %d, %v, %v; want %d, %v", b, d, err, tc.backlog, tc.timeout)
			}
		})
	}
}
