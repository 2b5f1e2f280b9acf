package modelconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// loadText writes a config.pbtxt for model name and loads it as Triton would.
func loadText(t *testing.T, name, text string) (*inference.ModelConfig, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(dir)
}

const ensIO = `
input [ { name: "IN0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "IN1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
`

// TestEnsembleSchedulingValidation ports the ensemble cases of Triton's
// L0_model_config / L0_ensemble_config: configurations that fail
// ValidateEnsembleSchedulingConfig at load, with Triton's messages.
func TestEnsembleSchedulingValidation(t *testing.T) {
	head := "platform: \"ensemble\"\nmax_batch_size: 8\n" + ensIO
	addsub := `step [ { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "IN0" } input_map { key: "INPUT1" value: "IN1" } output_map { key: "OUTPUT0" value: "OUT0" } output_map { key: "OUTPUT1" value: "OUT1" } } ]`
	tests := []struct {
		name, text, want string
	}{
		{"good", head + "ensemble_scheduling { " + addsub + " }", ""},
		{"no_step", head + "ensemble_scheduling { }", "must specify 'step' for ensemble 'no_step'"},
		{"no_model", head + `ensemble_scheduling { step [ { input_map { key: "A" value: "IN0" } output_map { key: "B" value: "OUT0" } } ] }`,
			"must specify 'model_name' in step 0 of ensemble 'no_model'"},
		{"no_input_map", head + `ensemble_scheduling { step [ { model_name: "m" output_map { key: "B" value: "OUT0" } } ] }`,
			"must specify 'input_map' in step 0 of ensemble 'no_input_map'"},
		{"no_output_map", head + `ensemble_scheduling { step [ { model_name: "m" input_map { key: "A" value: "IN0" } } ] }`,
			"must specify 'output_map' in step 0 of ensemble 'no_output_map'"},
		{"twice", head + `ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "A" value: "IN0" } input_map { key: "B" value: "IN1" } output_map { key: "X" value: "OUT0" } output_map { key: "Y" value: "OUT1" } },
			{ model_name: "b" input_map { key: "A" value: "IN0" } output_map { key: "X" value: "OUT0" } } ] }`,
			"ensemble tensor 'OUT0' can appear in an output map only once for ensemble 'twice' step 1"},
		{"input_unused", head + `ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "A" value: "IN0" } output_map { key: "X" value: "OUT0" } output_map { key: "Y" value: "OUT1" } } ] }`,
			"ensemble input 'IN1' for ensemble input_unused' is not used"},
		{"output_unused", head + `ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "A" value: "IN0" } input_map { key: "B" value: "IN1" } output_map { key: "X" value: "OUT0" } } ] }`,
			"ensemble output 'OUT1' for ensemble output_unused' is not used"},
		{"not_written", head + `ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "A" value: "IN0" } input_map { key: "B" value: "IN1" } output_map { key: "X" value: "OUT0" } },
			{ model_name: "b" input_map { key: "A" value: "MISSING" } output_map { key: "X" value: "OUT1" } } ] }`,
			"output 'OUT1' for ensemble 'not_written' is not written"},
		{"cycle", head + `ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "A" value: "IN0" } input_map { key: "B" value: "IN1" } output_map { key: "X" value: "OUT0" } },
			{ model_name: "b" input_map { key: "A" value: "T1" } output_map { key: "X" value: "T0" } },
			{ model_name: "c" input_map { key: "A" value: "T0" } output_map { key: "X" value: "T1" } output_map { key: "Y" value: "OUT1" } } ] }`,
			"output 'OUT1' for ensemble 'cycle' is not written"},
		{"dangling", head + `ensemble_scheduling { step [
			{ model_name: "a" input_map { key: "A" value: "IN0" } input_map { key: "B" value: "IN1" } output_map { key: "X" value: "OUT0" } output_map { key: "Y" value: "OUT1" } output_map { key: "Z" value: "EXTRA" } } ] }`,
			"ensemble tensor 'EXTRA' is unused in ensemble 'dangling'"},
		{"instance_group", head + "instance_group [ { kind: KIND_CPU } ]\nensemble_scheduling { " + addsub + " }",
			"instance group should not be specified for ensemble 'instance_group'"},
		{"backend", "backend: \"identity\"\n" + head + "ensemble_scheduling { " + addsub + " }",
			"Ensemble model 'backend' must have platform type 'ensemble' and empty backend type"},
		// Triton caches an ensemble's final response; a decoupled one has
		// a stream instead and is refused as any decoupled model is.
		{"cached", head + "response_cache { enable: true }\nensemble_scheduling { " + addsub + " }", ""},
		{"decoupled_cached", head + "model_transaction_policy { decoupled: true }\nresponse_cache { enable: true }\nensemble_scheduling { " + addsub + " }",
			"Response Cache does not currently support model decoupled_cached with 'decoupled' transaction policy. Please disable the response cache."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadText(t, tt.name, "name: \""+tt.name+"\"\n"+tt.text)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if k := tritonerr.KindOf(err); k != tritonerr.InvalidArg {
				t.Errorf("kind %v, want INVALID_ARG", k)
			}
		})
	}
}

// TestEnsembleCompositionDecoupledCache: an ensemble made decoupled by a
// decoupled step cannot keep response_cache, refused with Triton's message
// for a decoupled model with the cache; over a model that is not
// decoupled it keeps it.
func TestEnsembleCompositionDecoupledCache(t *testing.T) {
	io := `input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]`
	models := map[string]Composing{
		"simple": {Config: mustParse(t, `name: "simple" max_batch_size: 8 `+io), Versions: []int64{1}},
		"dec":    {Config: mustParse(t, `name: "dec" max_batch_size: 8 model_transaction_policy { decoupled: true } `+io), Versions: []int64{1}},
		"seq":    {Config: mustParse(t, `name: "seq" max_batch_size: 8 sequence_batching { } `+io), Versions: []int64{1}},
	}
	lookup := func(m string) (Composing, bool) { c, ok := models[m]; return c, ok }
	ensemble := func(name, step string) *inference.ModelConfig {
		return mustParse(t, `name: "`+name+`" platform: "ensemble" max_batch_size: 8 response_cache { enable: true }`+ensIO+
			`ensemble_scheduling { step [ { model_name: "`+step+`" model_version: -1
			input_map { key: "INPUT0" value: "IN0" } input_map { key: "INPUT1" value: "IN1" }
			output_map { key: "OUTPUT0" value: "OUT0" } output_map { key: "OUTPUT1" value: "OUT1" } } ] }`)
	}
	if dec, err := ValidateComposition(ensemble("cached", "simple"), lookup); err != nil || dec {
		t.Fatalf("over simple: decoupled %v, %v", dec, err)
	}
	_, err := ValidateComposition(ensemble("dec_cached", "dec"), lookup)
	want := "Response Cache does not currently support model dec_cached with 'decoupled' transaction policy. Please disable the response cache."
	if err == nil || err.Error() != want || tritonerr.KindOf(err) != tritonerr.InvalidArg {
		t.Fatalf("over dec: %v, want INVALID_ARG %q", err, want)
	}
	// A stateful step, directly or in a nested ensemble (uncached itself).
	nested := ensemble("nested", "seq")
	nested.ResponseCache = nil
	models["nested"] = Composing{Config: nested, Versions: []int64{1}}
	for _, step := range []string{"seq", "nested"} {
		_, err := ValidateComposition(ensemble("seq_cached", step), lookup)
		want := "Response Cache does not support ensemble seq_cached, whose step model seq has a sequence batching scheduler (its responses depend on the sequence's earlier requests). Please disable the response cache."
		if err == nil || err.Error() != want || tritonerr.KindOf(err) != tritonerr.InvalidArg {
			t.Errorf("over %s: %v, want INVALID_ARG %q", step, err, want)
		}
	}
	if _, err := ValidateComposition(nested, lookup); err != nil {
		t.Errorf("an uncached ensemble over seq: %v", err)
	}
}

func mustParse(t *testing.T, text string) *inference.ModelConfig {
	t.Helper()
	cfg, err := Parse("test", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestEnsembleComposition ports Triton's checks of an ensemble against its
// composing models (CheckNode, ValidateEnsembleConfig), with its messages.
func TestEnsembleComposition(t *testing.T) {
	simple := mustParse(t, `name: "simple" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]`)
	nobatch := mustParse(t, `name: "nobatch" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]`)
	fp32 := mustParse(t, `name: "fp32" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]`)
	shape8 := mustParse(t, `name: "shape8" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 8 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]`)
	small := mustParse(t, `name: "small" max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]`)
	decoupled := mustParse(t, `name: "dec" max_batch_size: 8 model_transaction_policy { decoupled: true }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]`)
	models := map[string]Composing{
		"simple": {Config: simple, Versions: []int64{1}}, "nobatch": {Config: nobatch, Versions: []int64{1}},
		"fp32": {Config: fp32, Versions: []int64{1}}, "shape8": {Config: shape8, Versions: []int64{1}},
		"small": {Config: small, Versions: []int64{1}}, "dec": {Config: decoupled, Versions: []int64{1}},
		"gone":      {Err: tritonerr.Unavailablef("unloaded")},
		"noversion": {Config: simple},
		"broken":    {Err: tritonerr.InvalidArgf("bad config"), Invalid: true},
		"inner": {Config: mustParse(t, `name: "inner" platform: "ensemble" max_batch_size: 8`+ensIO+"ensemble_scheduling { "+
			`step [ { model_name: "cycle" model_version: -1 input_map { key: "IN0" value: "IN0" } input_map { key: "IN1" value: "IN1" } output_map { key: "OUT0" value: "OUT0" } output_map { key: "OUT1" value: "OUT1" } } ]`+" }"), Versions: []int64{1}},
	}
	lookup := func(m string) (Composing, bool) { c, ok := models[m]; return c, ok }
	step := func(model, version, extraIn string) string {
		return `step [ { model_name: "` + model + `" model_version: ` + version + `
			input_map { key: "INPUT0" value: "IN0" } input_map { key: "INPUT1" value: "IN1" } ` + extraIn + `
			output_map { key: "OUTPUT0" value: "OUT0" } output_map { key: "OUTPUT1" value: "OUT1" } } ]`
	}
	tests := []struct {
		name, batch, steps, want string
		decoupled                bool
	}{
		{"ok", "8", step("simple", "-1", ""), "", false},
		{"ok_nobatch", "8", step("nobatch", "-1", ""), "", false},
		{"ok_version", "8", step("simple", "1", ""), "", false},
		{"ok_decoupled", "8", step("dec", "-1", ""), "", true},
		{"missing", "8", step("nothere", "-1", ""), "ensemble missing contains models that are not available or ambiguous: nothere", false},
		{"unloaded", "8", step("gone", "-1", ""), "ensemble 'unloaded' depends on 'gone' which has no loaded version. Model 'gone' loading failed with error: unloaded", false},
		{"nover", "8", step("noversion", "-1", ""), "ensemble 'nover' depends on 'noversion' which has no loaded version.", false},
		{"version", "8", step("simple", "3", ""), "ensemble 'version' depends on 'simple' whose required version 3 is not loaded.", false},
		{"batch", "8", step("small", "-1", ""), "ensemble batch allows maximum batch size 8, but it contains model small which only allows maximum batch size to be 4", false},
		{"dtype", "8", step("fp32", "-1", ""), "in ensemble dtype, ensemble tensor IN0: inconsistent data type: TYPE_INT32 is inferred from model dtype while TYPE_FP32 is inferred from model fp32", false},
		{"shape", "8", step("shape8", "-1", ""), "in ensemble shape, ensemble tensor IN0: inconsistent shape: [-1,16] is inferred from model shape while [-1,8] is inferred from model shape8", false},
		{"nonbatch_shape", "0", step("nobatch", "-1", ""), "in ensemble nonbatch_shape, ensemble tensor IN0: inconsistent shape: [16] is inferred from model nonbatch_shape while [-1,16] is inferred from model nobatch", false},
		{"cycle", "8", `step [ { model_name: "inner" model_version: -1 input_map { key: "IN0" value: "IN0" } input_map { key: "IN1" value: "IN1" } output_map { key: "OUT0" value: "OUT0" } output_map { key: "OUT1" value: "OUT1" } } ]`,
			"circular dependency between ensembles: cycle -> ... -> inner -> cycle", false},
		{"invalid", "8", step("broken", "-1", ""), "ensemble 'invalid' depends on 'broken' which is not valid. Model 'broken' failed with error: bad config", false},
		{"no_such_input", "8", step("simple", "-1", `input_map { key: "INPUT9" value: "IN0" }`), "in ensemble no_such_input, ensemble tensor IN0 is mapping to non-existing input INPUT9 in model simple", false},
		{"unmapped_input", "8", `step [ { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "IN0" } input_map { key: "INPUT0X" value: "IN1" }
			output_map { key: "OUTPUT0" value: "OUT0" } output_map { key: "OUTPUT1" value: "OUT1" } } ]`, "in ensemble unmapped_input, ensemble tensor IN1 is mapping to non-existing input INPUT0X in model simple", false},
		{"no_such_output", "8", `step [ { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "IN0" } input_map { key: "INPUT1" value: "IN1" }
			output_map { key: "OUTPUT0" value: "OUT0" } output_map { key: "OUTPUT9" value: "OUT1" } } ]`, "in ensemble no_such_output, ensemble tensor OUT1 is mapped from non-existing output OUTPUT9 in model simple", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, `name: "`+tt.name+`" platform: "ensemble" max_batch_size: `+tt.batch+ensIO+"ensemble_scheduling { "+tt.steps+" }")
			dec, err := ValidateComposition(cfg, lookup)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if dec != tt.decoupled {
					t.Errorf("decoupled %v, want %v", dec, tt.decoupled)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error\n %v\nwant\n %s", err, tt.want)
			}
			if k := tritonerr.KindOf(err); k != tritonerr.InvalidArg {
				t.Errorf("kind %v", k)
			}
		})
	}
}
