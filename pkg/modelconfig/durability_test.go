package modelconfig

import (
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
)

func seq(sb *inference.ModelSequenceBatching) *inference.ModelConfig_SequenceBatching {
	return &inference.ModelConfig_SequenceBatching{SequenceBatching: sb}
}

func TestStateDurability(t *testing.T) {
	withState := &inference.ModelSequenceBatching{State: []*inference.ModelSequenceBatching_State{{InputName: "IN", OutputName: "OUT"}}}
	param := func(v string) map[string]*inference.ModelParameter {
		return map[string]*inference.ModelParameter{DurabilityParameter: {StringValue: v}}
	}
	for _, tc := range []struct {
		name string
		cfg  *inference.ModelConfig
		want Durability
		err  string
	}{
		{"no parameter", &inference.ModelConfig{Name: "m", SchedulingChoice: seq(withState)}, DurabilityNone, ""},
		{"none", &inference.ModelConfig{Name: "m", SchedulingChoice: seq(withState), Parameters: param("none")}, DurabilityNone, ""},
		{"redis", &inference.ModelConfig{Name: "m", SchedulingChoice: seq(withState), Parameters: param("redis")}, DurabilityRedis, ""},
		{"unknown value", &inference.ModelConfig{Name: "m", SchedulingChoice: seq(withState), Parameters: param("disk")},
			DurabilityNone, "model 'm': unknown value 'disk' of parameter 'state_durability' (expected 'redis' or 'none')"},
		{"redis without implicit state", &inference.ModelConfig{Name: "m", SchedulingChoice: seq(&inference.ModelSequenceBatching{}), Parameters: param("redis")},
			DurabilityNone, "model 'm' sets parameter 'state_durability' to 'redis' but has no sequence_batching state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StateDurability(tc.cfg)
			if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("StateDurability = %v, %v; want %v, %q", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestRerunOnExecutorLoss(t *testing.T) {
	param := func(v string) map[string]*inference.ModelParameter {
		return map[string]*inference.ModelParameter{RerunParameter: {StringValue: v}}
	}
	for _, tc := range []struct {
		name string
		cfg  *inference.ModelConfig
		want Rerun
		err  string
	}{
		{"no parameter", &inference.ModelConfig{Name: "m"}, RerunDefault, ""},
		{"empty", &inference.ModelConfig{Name: "m", Parameters: param("")}, RerunDefault, ""},
		{"true", &inference.ModelConfig{Name: "m", Parameters: param("true")}, RerunAlways, ""},
		{"false", &inference.ModelConfig{Name: "m", Parameters: param("false")}, RerunNever, ""},
		{"unknown value", &inference.ModelConfig{Name: "m", Parameters: param("never")},
			RerunDefault, "model 'm': unknown value 'never' of parameter 'rerun_on_executor_loss' (expected 'true' or 'false')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RerunOnExecutorLoss(tc.cfg)
			if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
				t.Fatalf("RerunOnExecutorLoss = %v, %v; want %v, %q", got, err, tc.want, tc.err)
			}
		})
	}
	// A configuration with an unknown value does not load.
	cfg := &inference.ModelConfig{Name: "m", Backend: "identity", Parameters: param("never")}
	Normalize(cfg)
	if err := Validate(cfg); err == nil || !strings.Contains(err.Error(), "parameter 'rerun_on_executor_loss'") {
		t.Fatalf("Validate = %v, want the parameter's error", err)
	}
}
