package bus

// Subjects of the sequence router (services/sequence-router). They live in
// their own file so the sequence feature's names sit together.

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
)

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
