package sharedmemory

import (
	"bytes"
	"testing"
)

// TestEnsembleOutputs: an ensemble's outputs requested in shared memory
// are written into the client's regions, over HTTP and gRPC, by the steps
// that produce them; one that a later step reads as well (simple_chain's
// SUM) is read from the region by that step; outputs not in shared memory
// come back as data beside them. One executor serves every step, so the
// requests go to it whole.
func TestEnsembleOutputs(t *testing.T) {
	s := startServer(t, true)
	waitReady(t, s.http, "simple_ensemble", "simple_chain")
	twice0 := ints(func(i int) int32 { return 2 * int32(i) })
	twice1 := ints(func(i int) int32 { return 2 })
	for _, c := range s.clients(t) {
		t.Run(c.proto(), func(t *testing.T) {
			defer func() { must(t, c.unregister("")) }()
			m := simpleRegions(t, c)
			ins := []tensorIn{simpleIn("INPUT0", ref("input0_data", 0, 64), nil), simpleIn("INPUT1", ref("input1_data", 0, 64), nil)}

			clear(m.Data[2*page : 4*page])
			sent := s.srv.InProcess()
			r, err := c.infer("simple_ensemble", ins,
				[]tensorOut{{name: "OUTPUT0", shm: ref("output0_data", 0, 64)}, {name: "OUTPUT1", shm: ref("output1_data", 0, 64)}})
			must(t, err)
			one := s.srv.InProcess() - sent
			if !bytes.Equal(m.Data[2*page:2*page+64], sum) || !bytes.Equal(m.Data[3*page:3*page+64], diff) {
				t.Fatalf("simple_ensemble's outputs in shared memory: %v / %v", m.Data[2*page:2*page+64], m.Data[3*page:3*page+64])
			}
			for _, o := range []string{"OUTPUT0", "OUTPUT1"} {
				if len(r.data[o]) != 0 {
					t.Errorf("%s in shared memory came back with %d bytes of data", o, len(r.data[o]))
				}
			}

			clear(m.Data[2*page : 4*page])
			sent = s.srv.InProcess()
			r, err = c.infer("simple_chain", ins, []tensorOut{
				{name: "SUM", shm: ref("output0_data", 0, 64)}, {name: "OUTPUT0", shm: ref("output1_data", 0, 64)}, {name: "OUTPUT1"}})
			must(t, err)
			// One executor serves every step: each request goes to it
			// whole, and the steps read and write the regions there, so
			// the two-step chain puts no more on the bus than the one-step
			// ensemble (on the gateway's path, each step is a request of
			// its own, with its own hold of the regions).
			if two := s.srv.InProcess() - sent; two != one {
				t.Errorf("the bus carried %d messages for simple_chain and %d for simple_ensemble, want as many (the steps run on the executor)", two, one)
			}
			if !bytes.Equal(m.Data[2*page:2*page+64], sum) || !bytes.Equal(m.Data[3*page:3*page+64], twice0) {
				t.Fatalf("simple_chain's outputs in shared memory: SUM %v, OUTPUT0 %v", m.Data[2*page:2*page+64], m.Data[3*page:3*page+64])
			}
			if len(r.data["SUM"]) != 0 || len(r.data["OUTPUT0"]) != 0 || !bytes.Equal(r.data["OUTPUT1"], twice1) {
				t.Fatalf("simple_chain's response: SUM %d bytes, OUTPUT0 %d bytes, OUTPUT1 %v", len(r.data["SUM"]), len(r.data["OUTPUT0"]), r.data["OUTPUT1"])
			}
		})
	}
}
