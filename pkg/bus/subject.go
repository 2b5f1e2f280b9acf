package bus

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Subjects and timings shared by every service. Subject names are built here
// and nowhere else, so that a rename is one change.
const (
	// Prefix starts every Nereid subject; the version lets a future wire
	// format run beside this one.
	Prefix = "nereid.v1"

	// QueueExecutors is the queue group executors join on infer subjects, so
	// each request goes to one executor serving the model.
	QueueExecutors = "executors"

	// HeartbeatSubject carries ExecutorHeartbeat, published by every executor
	// each HeartbeatInterval (withdraw=true on shutdown).
	HeartbeatSubject = Prefix + ".catalog.heartbeat"

	// SolicitSubject carries CatalogRequest, published by a gateway when it
	// starts; executors answer by publishing a heartbeat at once.
	SolicitSubject = Prefix + ".catalog.solicit"

	// CancelSubject carries the reply subject and the cancellation key
	// (the body, as text: "R key") of a request its requester cancelled;
	// every Conn that handles requests listens and cancels the ctx of the
	// handler serving it when the key is the request's (cancel.go).
	CancelSubject = Prefix + ".cancel"

	// AliveSubject carries liveness probes: the ids (ProbeID of their
	// reply subjects, back to back) of requests whose requester has heard
	// nothing for a while. Every Conn that handles requests listens, and
	// answers for those it holds on their reply subjects (HeaderAlive).
	AliveSubject = Prefix + ".alive"

	// ModelControlSubject carries ModelControlRequest (repository load and
	// unload), published by a gateway; every executor answers with a
	// ModelControlReply once it has acted.
	ModelControlSubject = Prefix + ".models.control"

	// LoadedModelsSubject carries CatalogRequest from an executor starting in
	// explicit model control mode; every executor answers with its
	// ExecutorCatalog, so the newcomer loads what the others have loaded.
	LoadedModelsSubject = Prefix + ".models.loaded"

	// HeartbeatInterval is how often executors publish a heartbeat.
	HeartbeatInterval = time.Second
	// HeartbeatExpiry is how long a gateway keeps an executor it has not heard from.
	HeartbeatExpiry = 3 * time.Second
)

// Model version states as executors report them in busv1.ModelVersionState
// (Triton's ModelReadyState names).
const (
	StateReady       = "READY"
	StateUnavailable = "UNAVAILABLE"
	StateLoading     = "LOADING"
	StateUnloading   = "UNLOADING"
)

// ReasonUnloaded is the reason of a version unloaded through the repository
// API (or by a poll), as Triton's index gives it.
const ReasonUnloaded = "unloaded"

const (
	inferPrefix = Prefix + ".infer."
	execPrefix  = Prefix + ".exec."
)

// InferSubject is the subject executors serving version of model listen on
// (queue QueueExecutors): "nereid.v1.infer.<Token(model)>.<Token(version)>".
func InferSubject(model, version string) string {
	return inferPrefix + Token(model) + "." + Token(version)
}

// InferNodeSubject is the subject executors on node serving version of model
// also listen on (queue QueueExecutors), for requests that must run on that
// node: their tensors sit in the node's shared memory, or were handed off
// there. "nereid.v1.infer.<Token(model)>.<Token(version)>.node.<Token(node)>".
func InferNodeSubject(model, version, node string) string {
	return InferSubject(model, version) + ".node." + Token(node)
}

// ExecutorCatalogSubject is where executor id answers CatalogRequest with its
// ExecutorCatalog: "nereid.v1.exec.<Token(id)>.catalog".
func ExecutorCatalogSubject(id string) string {
	return execPrefix + Token(id) + ".catalog"
}

// ExecutorStatsSubject is where executor id answers StatisticsRequest with a
// StatisticsReply: "nereid.v1.exec.<Token(id)>.stats".
func ExecutorStatsSubject(id string) string {
	return execPrefix + Token(id) + ".stats"
}

// GatewayStatsSubject is where every gateway answers
// GatewayStatisticsRequest with a GatewayStatisticsReply: its own part of
// the statistics of the versions asked for, which no executor holds.
// Gateways subscribe without a queue group, so that the one answering the
// statistics extension gathers (Conn.Gather) every gateway's part:
// "nereid.v1.gateway.stats".
const GatewayStatsSubject = Prefix + ".gateway.stats"

// PingSubject is where the named service ("shm-registry",
// "sequence-router") answers liveness pings with its name:
// "nereid.v1.svc.<Token(service)>.ping".
func PingSubject(service string) string {
	return Prefix + ".svc." + Token(service) + ".ping"
}

// escape starts an escaped byte in a token. It is not a special character for
// NATS, shells or URLs (monitoring endpoints take subjects in query strings).
const escape = '~'

const hexDigits = "0123456789ABCDEF"

// plain reports whether b stands for itself in a token.
func plain(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_'
}

// Token escapes any string into one valid NATS subject token. Letters, digits,
// '-' and '_' stand for themselves; every other byte becomes '~' and two
// upper-case hex digits (so "resnet50.onnx" is "resnet50~2Eonnx"); the empty
// string is "~" alone. The mapping is injective: Untoken inverts it.
func Token(s string) string {
	if s == "" {
		return string(escape)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(escape)
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xF])
	}
	return b.String()
}

var errToken = errors.New("bus: not a token made by Token")

// Untoken inverts Token. It accepts exactly the strings Token produces, so
// Token(Untoken(t)) == t whenever err is nil.
func Untoken(t string) (string, error) {
	if t == string(escape) {
		return "", nil
	}
	if t == "" {
		return "", errToken
	}
	if strings.IndexByte(t, escape) < 0 {
		for i := 0; i < len(t); i++ {
			if !plain(t[i]) {
				return "", fmt.Errorf("%w: %q", errToken, t)
			}
		}
		return t, nil
	}
	b := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		c := t[i]
		if plain(c) {
			b = append(b, c)
			continue
		}
		if c != escape || i+2 >= len(t) {
			return "", fmt.Errorf("%w: %q", errToken, t)
		}
		hi, lo := unhex(t[i+1]), unhex(t[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: %q", errToken, t)
		}
		v := byte(hi<<4 | lo)
		if plain(v) {
			// Token never escapes these; accepting them would give two
			// tokens for one name.
			return "", fmt.Errorf("%w: %q", errToken, t)
		}
		b = append(b, v)
		i += 2
	}
	return string(b), nil
}

// unhex decodes an upper-case hex digit (Token writes no other), or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// ValidToken reports whether t can stand as one token of a NATS subject: not
// empty, printable ASCII, and none of '.', '*', '>'.
func ValidToken(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c <= ' ' || c >= 0x7f || c == '.' || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// target names what a subject leads to, for error messages a user can act on:
// "model 'simple' version 1", "executor 'e1' (catalog)", "subject 'x'".
// inferTarget names the model, version, and for node and device subjects the
// node and GPU, of an infer subject's tokens after the prefix.
func inferTarget(tokens []string) (string, bool) {
	if len(tokens) < 2 {
		return "", false
	}
	model, err1 := Untoken(tokens[0])
	version, err2 := Untoken(tokens[1])
	if err1 != nil || err2 != nil {
		return "", false
	}
	t := fmt.Sprintf("model '%s'", model)
	if version != "" {
		t += " version " + version
	}
	switch {
	case len(tokens) == 2:
		return t, true
	case len(tokens) >= 4 && tokens[2] == "node":
		node, err := Untoken(tokens[3])
		if err != nil {
			return "", false
		}
		t += fmt.Sprintf(" on node '%s'", node)
		if len(tokens) == 4 {
			return t, true
		}
		if len(tokens) == 6 && tokens[4] == "gpu" {
			return t + " GPU " + tokens[5], true
		}
	}
	return "", false
}

func target(subject string) string {
	if rest, ok := strings.CutPrefix(subject, inferPrefix); ok {
		if t, ok := inferTarget(strings.Split(rest, ".")); ok {
			return t
		}
	}
	if rest, ok := strings.CutPrefix(subject, execPrefix); ok {
		if id, what, ok := strings.Cut(rest, "."); ok {
			if name, err := Untoken(id); err == nil {
				switch what {
				case "catalog":
					return fmt.Sprintf("executor '%s' (catalog)", name)
				case "stats":
					return fmt.Sprintf("executor '%s' (statistics)", name)
				}
				return fmt.Sprintf("executor '%s' (%s)", name, what)
			}
		}
	}
	return fmt.Sprintf("subject '%s'", subject)
}

// noRespondersMessage says who is missing when nothing listens on subject.
func noRespondersMessage(subject string) string {
	t := target(subject)
	switch {
	case strings.HasPrefix(subject, inferPrefix) && strings.HasPrefix(t, "model "):
		return "no executor is serving " + t
	case strings.HasPrefix(t, "executor "):
		return t + " is not reachable: no responders on " + subject
	}
	return "no responders on " + t
}

// Subjects of the sequence router (services/sequence-router).

const (
	seqPrefix = Prefix + ".seq."

	// QueueRouters is the queue group sequence routers join, so that a
	// request reaches exactly one router even while two briefly overlap
	// during a takeover.
	QueueRouters = "routers"

	// SequenceInferWildcard and SequencePullWildcard match every model's
	// sequence subjects; the active router serves them all.
	SequenceInferWildcard = seqPrefix + "*.*.infer"
	SequencePullWildcard  = seqPrefix + "*.*.pull"

	// SequenceClaimWildcard matches every model's claim subject: routers
	// listen (no queue) and try to take the model's lease.
	SequenceClaimWildcard = seqPrefix + "*.*.claim"
	// SequenceTakeoverWildcard matches every model's takeover subject:
	// executors and gateways listen (no queue).
	SequenceTakeoverWildcard = seqPrefix + "*.*.takeover"
	// SequenceStatsWildcard matches every model's stats subject.
	SequenceStatsWildcard = seqPrefix + "*.*.stats"
)

// ModelKey names one model version as one string, "<model>.<version>" in
// subject tokens: the key under which services keep per-model state (the
// sequence router's store, the gateway's waiting requests), reversible and
// unique as the tokens are.
func ModelKey(model, version string) string { return Token(model) + "." + Token(version) }

// SequenceClaimSubject is where an executor instance of a sequence model
// that found no router serving it publishes its busv1.SequencePull, so
// that a router takes the model's lease: "nereid.v1.seq.<m>.<v>.claim".
func SequenceClaimSubject(model, version string) string {
	return seqPrefix + Token(model) + "." + Token(version) + ".claim"
}

// SequenceTakeoverSubject is where a router that took a model's lease
// announces its epoch (busv1.SequenceTakeover): executors fence older
// epochs and say which requests they hold, gateways ask the new router (on
// the infer subject) about requests the old one may have held:
// "nereid.v1.seq.<m>.<v>.takeover".
func SequenceTakeoverSubject(model, version string) string {
	return seqPrefix + Token(model) + "." + Token(version) + ".takeover"
}

// SequenceInferSubject is where gateways send requests for a model with a
// sequence batcher (busv1.SequenceRequest): "nereid.v1.seq.<m>.<v>.infer".
func SequenceInferSubject(model, version string) string {
	return seqPrefix + Token(model) + "." + Token(version) + ".infer"
}

// SequencePullSubject is where executor instances of such a model ask the
// router for their next batch (busv1.SequencePull -> busv1.SequenceBatch):
// "nereid.v1.seq.<m>.<v>.pull".
func SequencePullSubject(model, version string) string {
	return seqPrefix + Token(model) + "." + Token(version) + ".pull"
}

// SequenceStatsSubject is where a gateway asks the router serving a model
// with a sequence batcher for its part of the model's metrics
// (busv1.StatisticsRequest -> busv1.StatisticsReply, metrics only):
// "nereid.v1.seq.<m>.<v>.stats".
func SequenceStatsSubject(model, version string) string {
	return seqPrefix + Token(model) + "." + Token(version) + ".stats"
}

// ParseSequenceSubject returns the model and version of a sequence subject,
// and its last token ("infer" or "pull").
func ParseSequenceSubject(subject string) (model, version, kind string, ok bool) {
	if len(subject) <= len(seqPrefix) || subject[:len(seqPrefix)] != seqPrefix {
		return "", "", "", false
	}
	rest := subject[len(seqPrefix):]
	var toks [3]string
	n := 0
	start := 0
	for i := 0; i <= len(rest); i++ {
		if i == len(rest) || rest[i] == '.' {
			if n == 3 {
				return "", "", "", false
			}
			toks[n] = rest[start:i]
			n++
			start = i + 1
		}
	}
	if n != 3 {
		return "", "", "", false
	}
	m, err1 := Untoken(toks[0])
	v, err2 := Untoken(toks[1])
	if err1 != nil || err2 != nil {
		return "", "", "", false
	}
	return m, v, toks[2], true
}

// SubjectKind names the family of a subject, for metrics labelled by it: a
// few fixed names ("infer", "sequence_infer", "sequence_pull",
// "executor_stats", "shm_register", "settings", "model_control", ...), never
// a model or executor name. Unknown subjects are "other".
func SubjectKind(subject string) string {
	rest, ok := strings.CutPrefix(subject, Prefix+".")
	if !ok {
		return "other"
	}
	// An inference request's, the most frequent, is named without
	// splitting the subject (an allocation per request).
	first, _, _ := strings.Cut(rest, ".")
	if first == "infer" {
		return "infer"
	}
	// An ensemble run whole on an executor is as frequent.
	if first == "exec" && strings.Count(rest, ".") == 2 && strings.HasSuffix(rest, ".ensemble") {
		return "executor_ensemble"
	}
	toks := strings.Split(rest, ".")
	switch toks[0] {
	case "seq":
		if len(toks) == 4 {
			return "sequence_" + toks[3]
		}
	case "exec":
		if len(toks) == 3 {
			return "executor_" + toks[2]
		}
	case "shm":
		if len(toks) >= 2 {
			return "shm_" + toks[1]
		}
	case "settings":
		return "settings"
	case "models":
		if len(toks) == 2 && (toks[1] == "control" || toks[1] == "loaded") {
			return "model_" + toks[1]
		}
	case "catalog":
		return "catalog"
	case "svc":
		return "ping"
	case "server":
		return "server_query"
	}
	return "other"
}
