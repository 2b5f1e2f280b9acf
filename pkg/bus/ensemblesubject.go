package bus

// ExecutorEnsembleSubject is where executor id answers an inference request
// to an ensemble whose steps' models it all serves (inference
// ModelInferRequest, replied to with ModelInferResponse, as InferSubject):
// it runs the step graph itself, each step in-process, so that the tensors
// between steps never leave it. A gateway sends a request here only when
// its catalog says the executor holds the ensemble and every step's model
// READY: "nereid.v1.exec.<Token(id)>.ensemble".
func ExecutorEnsembleSubject(id string) string {
	return execPrefix + Token(id) + ".ensemble"
}
