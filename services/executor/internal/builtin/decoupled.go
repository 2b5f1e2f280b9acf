package builtin

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The decoupled example backends ("repeat", "square", "words") send their
// responses from goroutines an instance owns, after Execute has returned,
// as Triton's repeat and square backends do from their own threads: the
// instance takes its next batch while earlier requests still stream.

// producers owns the goroutines of one instance that send responses.
type producers struct {
	wg   sync.WaitGroup
	stop chan struct{} // closed by Finalize: stop producing
	once sync.Once
}

func newProducers() *producers { return &producers{stop: make(chan struct{})} }

// run streams one request on its own goroutine; the request always ends
// with the final flag, whatever produce did.
func (p *producers) run(r *backend.Request, produce func(s *backend.ResponseSender)) {
	p.wg.Go(func() {
		s := r.ResponseSender()
		defer s.SendFlags(backend.ResponseFinal)
		produce(s)
	})
}

// sleep waits d, and reports false when the client went away or the
// instance is stopping meanwhile: the producer should stop.
func (p *producers) sleep(r *backend.Request, d time.Duration) bool {
	if r.IsCancelled() {
		return false
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-p.stop:
	}
	return false
}

// finalize stops the producers and waits for them.
func (p *producers) finalize() error {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
	return nil
}

// requireDecoupled refuses a model that is not decoupled: these backends
// answer with many responses.
func requireDecoupled(m backend.ModelInfo, name string) error {
	if !m.Config.GetModelTransactionPolicy().GetDecoupled() {
		return tritonerr.InvalidArgf("%s backend: model '%s' must use the decoupled transaction policy (model_transaction_policy { decoupled: true })", name, m.Name)
	}
	return nil
}

func uint32s(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

func appendUint32(dst []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(dst, v) }

// decoupledModel is the Model of the decoupled example backends: every
// instance gets its own producers.
type decoupledModel struct {
	execute func(p *producers, ctx context.Context, r *backend.Request) error
}

func (decoupledModel) Finalize() error { return nil }

func (m decoupledModel) NewInstance(context.Context, backend.InstanceInfo) (backend.Instance, error) {
	return &decoupledInstance{m: m, p: newProducers()}, nil
}

type decoupledInstance struct {
	m decoupledModel
	p *producers
}

func (i *decoupledInstance) Execute(ctx context.Context, reqs []*backend.Request) error {
	for _, r := range reqs {
		if err := i.m.execute(i.p, ctx, r); err != nil {
			_ = r.RespondError(err)
		}
	}
	return nil
}

func (i *decoupledInstance) Finalize() error { return i.p.finalize() }
