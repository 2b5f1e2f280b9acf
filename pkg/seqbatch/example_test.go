package seqbatch_test

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nereid-io/nereid/pkg/seqbatch"
)

// bindings is a Store that keeps the bindings in memory.
type bindings map[seqbatch.ID]seqbatch.SlotRef

func (b bindings) Bind(id seqbatch.ID, at seqbatch.SlotRef) error { b[id] = at; return nil }
func (b bindings) Backlog(seqbatch.ID) error                      { return nil }
func (b bindings) Unbind(id seqbatch.ID) error                    { delete(b, id); return nil }

// The life of one sequence on a direct batcher with two slots: the START
// binds it to a slot, the idle instance gets a batch with the request (a
// direct batch reaches only as far as its highest busy slot), the END
// frees the slot, and the sequence leaves the store once the END request is
// answered.
func Example() {
	st := bindings{}
	m := seqbatch.NewModel(seqbatch.Config{Model: "acc", Strategy: seqbatch.Direct, SlotsPerInstance: 2, MaxBatch: 2, Idle: time.Second},
		st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	inst := seqbatch.InstanceKey{Executor: "e1", Index: 0}
	now := time.Unix(0, 0)
	m.AddInstance(now, inst) // the instance asked for work

	id := seqbatch.UintID(42)
	if err := m.Enqueue(now, &seqbatch.Request{ID: id, Start: true, Data: "first"}); err != nil {
		fmt.Println(err)
	}
	b, _ := m.Next(now, inst) // the instance is idle: a batch for it
	slot := st[id].Slot
	fmt.Println("batch of", len(b.Entries), "with", b.Real(), "request; bound to slot", slot)

	if err := m.Enqueue(now, &seqbatch.Request{ID: id, End: true, Data: "last"}); err != nil {
		fmt.Println(err)
	}
	b, _ = m.Next(now, inst)
	fmt.Println("END:", b.Entries[slot].End, "bindings while it runs:", len(st))
	m.Answered(b.Entries[slot].Req) // the executor answered it
	fmt.Println("bindings once answered:", len(st))
	fmt.Println("failures at the next wake-up:", len(m.Tick(now.Add(time.Hour))))
	// Output:
	// batch of 1 with 1 request; bound to slot 0
	// END: true bindings while it runs: 1
	// bindings once answered: 0
	// failures at the next wake-up: 0
}
