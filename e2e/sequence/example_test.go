package sequence

import (
	"fmt"
	"testing"
)

// values is what Triton's sequence client examples send after the START
// request (0 for sequence 0, 100 for sequence 1).
var values = []int32{11, 7, 5, 3, 2, 0, 1}

// TestExamples runs Triton's simple_*_sequence client examples (sync HTTP,
// sync gRPC, gRPC stream) against separate processes with Redis, and
// checks Triton's answers.
func TestExamples(t *testing.T) {
	e := start(t, opts{models: []string{"simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence"}})

	// Expected answers as the clients compute them.
	expectInt := func(dyna bool, id uint64, first int32, sign int32) []int32 {
		out := []int32{first + 1}
		for _, v := range values {
			x := sign * v
			if dyna && v == 1 {
				x += int32(id)
			}
			out = append(out, x)
		}
		return out
	}
	expectString := func(dyna bool, id string) []int32 {
		out := []int32{21}
		if dyna {
			out[0] = 20
		}
		acc := out[0]
		for _, v := range values {
			if dyna {
				acc += -v
				if v == 1 {
					var n int32
					fmt.Sscan(id, &n)
					acc += n
				}
				out = append(out, acc)
			} else {
				out = append(out, -v)
			}
		}
		return out
	}

	for _, dyna := range []bool{false, true} {
		intModel, strModel := "simple_sequence", "simple_sequence"
		if dyna {
			intModel, strModel = "simple_dyna_sequence", "simple_string_dyna_sequence"
		}
		t.Run(fmt.Sprintf("http dyna=%v", dyna), func(t *testing.T) {
			id0, id1 := uint64(1000), uint64(1001)
			var r0, r1 []int32
			send := func(id uint64, v int32, start, end bool) int32 {
				got, code, msg := httpInfer(t, e.g.HTTP(), intModel, id, v, start, end, nil)
				if code != 200 {
					t.Fatalf("infer: %d %s", code, msg)
				}
				return got
			}
			r0 = append(r0, send(id0, 0, true, false))
			r1 = append(r1, send(id1, 100, true, false))
			for _, v := range values {
				r0 = append(r0, send(id0, v, false, v == 1))
				r1 = append(r1, send(id1, -v, false, v == 1))
			}
			checkSeq(t, r0, expectInt(dyna, id0, 0, 1))
			checkSeq(t, r1, expectInt(dyna, id1, 100, -1))
		})
		t.Run(fmt.Sprintf("grpc dyna=%v", dyna), func(t *testing.T) {
			c := grpcClient(t, e.g.GRPC())
			var r0, rs []int32
			sid := "1002"
			send := func(model string, id any, v int32, start, end bool) int32 {
				resp, err := c.ModelInfer(ctx(t), grpcRequest(model, "", id, v, start, end))
				if err != nil {
					t.Fatalf("infer: %v", err)
				}
				return output(resp)
			}
			r0 = append(r0, send(intModel, uint64(2000), 0, true, false))
			rs = append(rs, send(strModel, sid, 20, true, false))
			for _, v := range values {
				r0 = append(r0, send(intModel, uint64(2000), v, false, v == 1))
				rs = append(rs, send(strModel, sid, -v, false, v == 1))
			}
			checkSeq(t, r0, expectInt(dyna, 2000, 0, 1))
			checkSeq(t, rs, expectString(dyna, sid))
		})
		t.Run(fmt.Sprintf("grpc stream dyna=%v", dyna), func(t *testing.T) {
			c := grpcClient(t, e.g.GRPC())
			stream, err := c.ModelStreamInfer(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			id0, id1, sid := uint64(3000), uint64(3001), "3002"
			// As the stream client: all of sequence 0, then 1, then the
			// string sequence, without waiting for answers.
			n := 0
			for i, v := range append([]int32{0}, values...) {
				_ = stream.Send(grpcRequest(intModel, fmt.Sprintf("%d_%d", id0, i), id0, v, i == 0, v == 1 && i > 0))
				n++
			}
			for i, v := range append([]int32{100}, neg(values)...) {
				_ = stream.Send(grpcRequest(intModel, fmt.Sprintf("%d_%d", id1, i), id1, v, i == 0, i == len(values)))
				n++
			}
			for i, v := range append([]int32{20}, neg(values)...) {
				_ = stream.Send(grpcRequest(strModel, fmt.Sprintf("%s_%d", sid, i), sid, v, i == 0, i == len(values)))
				n++
			}
			_ = stream.CloseSend()
			got := map[string][]int32{}
			for range n {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if resp.GetErrorMessage() != "" {
					t.Fatalf("stream error: %s", resp.GetErrorMessage())
				}
				var key string
				fmt.Sscanf(resp.GetInferResponse().GetId(), "%4s", &key)
				got[key] = append(got[key], output(resp.GetInferResponse()))
			}
			checkSeq(t, got["3000"], expectInt(dyna, id0, 0, 1))
			checkSeq(t, got["3001"], expectInt(dyna, id1, 100, -1))
			checkSeq(t, got["3002"], expectString(dyna, sid))
		})
	}
}

func neg(v []int32) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = -x
	}
	return out
}

func checkSeq(t *testing.T, got, want []int32) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
}
