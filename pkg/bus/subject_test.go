package bus

import (
	"strings"
	"testing"
)

func TestToken(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"simple", "simple"},
		{"simple_int8", "simple_int8"},
		{"Model-1", "Model-1"},
		{"", "~"},
		{"resnet50.onnx", "resnet50~2Eonnx"},
		{"a b", "a~20b"},
		{"a*b>c", "a~2Ab~3Ec"},
		{"~", "~7E"},
		{"~7E", "~7E7E"},
		{"é", "~C3~A9"},
		{"a/b", "a~2Fb"},
		{"\x00", "~00"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := Token(tt.in)
			if got != tt.want {
				t.Fatalf("Token(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !ValidToken(got) {
				t.Fatalf("Token(%q) = %q is not a valid token", tt.in, got)
			}
			back, err := Untoken(got)
			if err != nil || back != tt.in {
				t.Fatalf("Untoken(%q) = %q, %v; want %q", got, back, err, tt.in)
			}
		})
	}
}

func TestUntokenRejects(t *testing.T) {
	for _, tok := range []string{"", "a.b", "~", "~2", "~2e", "~41", "a~", "a~G0", "a b", "*", ">", "~~"} {
		t.Run(tok, func(t *testing.T) {
			s, err := Untoken(tok)
			if tok == "~" {
				// The empty name.
				if err != nil || s != "" {
					t.Fatalf("Untoken(%q) = %q, %v", tok, s, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Untoken(%q) = %q, want an error", tok, s)
			}
		})
	}
}

func TestSubjects(t *testing.T) {
	tests := []struct{ got, want string }{
		{InferSubject("simple", "1"), "nereid.v1.infer.simple.1"},
		{InferSubject("my.model", "12"), "nereid.v1.infer.my~2Emodel.12"},
		{ExecutorCatalogSubject("gpu-0"), "nereid.v1.exec.gpu-0.catalog"},
		{ExecutorStatsSubject("node a/0"), "nereid.v1.exec.node~20a~2F0.stats"},
		{ExecutorEnsembleSubject("gpu-0"), "nereid.v1.exec.gpu-0.ensemble"},
		{GatewayStatsSubject, "nereid.v1.gateway.stats"},
		{PlacementStateSubject, "nereid.v1.placement.state"},
		{PlacementPinSubject, "nereid.v1.placement.pin"},
		{PlacementControlSubject, "nereid.v1.placement.control"},
		{HeartbeatSubject, "nereid.v1.catalog.heartbeat"},
		{SolicitSubject, "nereid.v1.catalog.solicit"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestTarget(t *testing.T) {
	tests := []struct{ subject, target, noResp string }{
		{InferSubject("my.model", "3"), "model 'my.model' version 3", "no executor is serving model 'my.model' version 3"},
		{ExecutorCatalogSubject("e1"), "executor 'e1' (catalog)", "executor 'e1' (catalog) is not reachable: no responders on nereid.v1.exec.e1.catalog"},
		{ExecutorStatsSubject("e1"), "executor 'e1' (statistics)", "executor 'e1' (statistics) is not reachable: no responders on nereid.v1.exec.e1.stats"},
		{InferNodeSubject("simple", "1", "node-a"), "model 'simple' version 1 on node 'node-a'", "no executor is serving model 'simple' version 1 on node 'node-a'"},
		{InferDeviceSubject("simple", "1", "n.b", 2), "model 'simple' version 1 on node 'n.b' GPU 2", "no executor is serving model 'simple' version 1 on node 'n.b' GPU 2"},
		{InferSubject("simple", "1") + ".other.x", "subject 'nereid.v1.infer.simple.1.other.x'", "no responders on subject 'nereid.v1.infer.simple.1.other.x'"},
		{"foo.bar", "subject 'foo.bar'", "no responders on subject 'foo.bar'"},
	}
	for _, tt := range tests {
		t.Run(tt.subject, func(t *testing.T) {
			if got := target(tt.subject); got != tt.target {
				t.Errorf("target = %q, want %q", got, tt.target)
			}
			if got := noRespondersMessage(tt.subject); got != tt.noResp {
				t.Errorf("noRespondersMessage = %q, want %q", got, tt.noResp)
			}
		})
	}
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "simple", "a.b", "~", "~7E", "é", "\x00\xff", "a b*c>d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := Token(s)
		if !ValidToken(tok) {
			t.Fatalf("Token(%q) = %q is not a valid token", s, tok)
		}
		back, err := Untoken(tok)
		if err != nil || back != s {
			// Untoken(Token(s)) == s for all s makes Token injective.
			t.Fatalf("Untoken(Token(%q)) = %q, %v", s, back, err)
		}
	})
}

func FuzzUntoken(f *testing.F) {
	for _, s := range []string{"~", "simple", "a~2Eb", "~7E7E", "~41", "a~", "~2e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		s, err := Untoken(tok)
		if err != nil {
			return
		}
		// Only canonical tokens decode, so each name has exactly one token.
		if got := Token(s); got != tok {
			t.Fatalf("Token(Untoken(%q)) = %q", tok, got)
		}
	})
}

func TestPingSubject(t *testing.T) {
	if got := PingSubject("shm-registry"); got != "nereid.v1.svc.shm-registry.ping" {
		t.Fatalf("PingSubject = %q", got)
	}
}

func TestInferNodeSubject(t *testing.T) {
	if got := InferNodeSubject("a.b", "1", "node-1"); got != "nereid.v1.infer.a~2Eb.1.node.node-1" {
		t.Fatalf("InferNodeSubject = %q", got)
	}
}

func TestSubjectKind(t *testing.T) {
	for subject, want := range map[string]string{
		InferSubject("simple", "1"):       "infer",
		InferNodeSubject("a.b", "", "n1"): "infer",
		SequenceInferSubject("seq", "1"):  "sequence_infer",
		SequencePullSubject("seq", "1"):   "sequence_pull",
		SequenceStatsSubject("seq", "1"):  "sequence_stats",
		ExecutorStatsSubject("ex-1"):      "executor_stats",
		ExecutorCatalogSubject("ex-1"):    "executor_catalog",
		ExecutorEnsembleSubject("ex-1"):   "executor_ensemble",
		ModelControlSubject:               "model_control",
		LoadedModelsSubject:               "model_loaded",
		ShmRegisterSubject:                "shm_" + strings.Split(ShmRegisterSubject, ".")[3],
		PingSubject("sequence-router"):    "ping",
		ModelStatisticsSubject:            "server_query",
		"elsewhere.x":                     "other",
		Prefix + ".unknown":               "other",
	} {
		if got := SubjectKind(subject); got != want {
			t.Errorf("SubjectKind(%q) = %q, want %q", subject, got, want)
		}
	}
}
