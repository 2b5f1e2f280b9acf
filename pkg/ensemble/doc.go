// Package ensemble is the step graph of Triton's ensemble scheduler, as
// pure decisions: which steps an ensemble request needs (Triton prunes the
// steps no requested output depends on), which of them can start once the
// tensors they read exist (for each response of a decoupled step
// separately), when the ensemble answers and when its last response is
// due. A Run does no I/O and starts no goroutine: whoever runs the steps
// tells it what came back. Plan.Drive is that loop, over a StepFunc that
// runs one step's request, its goroutines all ended when it returns. Two
// use it: a gateway, routing each step like a client's request to its
// model, and an executor that serves every composing model of a request's
// steps, which runs them in-process so that the tensors between them never
// leave it (docs/ensembles.md).
package ensemble
