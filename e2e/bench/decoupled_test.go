package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/services/standalone"
)

// The decoupled benchmarks run the standalone server on
// testdata/decoupled_repository:
//
//   - one request to square_int32 that streams 1,000 small responses over
//     ModelStreamInfer, against a bare gRPC server streaming the same 1,000
//     messages for each request (target: responses/s >= 0.7x);
//   - the time to the first response of a decoupled model (text_words, one
//     word: one response) on a stream, against a unary request to the same
//     backend and input without the decoupled policy (target: p50 <= 1.2x).

const streamResponses = 1000

func init() {
	comparisons = append(comparisons,
		comparison{"nereid-decoupled-1000/c1", "grpc-stream-1000/c1", throughput, 0.70, 0},
		comparison{"nereid-decoupled-first/c1", "nereid-unary-words/c1", latency, 1.20, 0},
	)
}

var decOnce struct {
	sync.Mutex
	addr, bare string
	err        error
}

// startRepoServer starts the standalone server on repo (relative to this
// directory), waits until models are ready, stops it at the end of the run
// and returns its gRPC address.
func startRepoServer(repo string, models ...string) (string, error) {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return "", err
	}
	cfg := standalone.DefaultConfig()
	cfg.ModelRepository = repo
	cfg.Host = "127.0.0.1"
	cfg.HTTPPort, cfg.GRPCPort = 0, 0
	cfg.AllowMetrics = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, stop, err := runStandalone(cfg, models...)
	if err != nil {
		return "", err
	}
	fx.mu.Lock()
	fx.onClose = append(fx.onClose, stop)
	fx.mu.Unlock()
	return srv.Gateway().GRPCAddr(), nil
}

// decoupledFixture starts the server and the bare streaming baseline once.
func decoupledFixture(b *testing.B) (nereid, bare string) {
	decOnce.Lock()
	defer decOnce.Unlock()
	if decOnce.addr == "" && decOnce.err == nil {
		decOnce.addr, decOnce.bare, decOnce.err = startDecoupled()
	}
	if decOnce.err != nil {
		b.Fatalf("starting the decoupled fixture: %v", decOnce.err)
	}
	return decOnce.addr, decOnce.bare
}

func startDecoupled() (string, string, error) {
	addr, err := startRepoServer(filepath.Join("testdata", "decoupled_repository"), "square_int32", "text_words", "text_words_unary")
	if err != nil {
		return "", "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", err
	}
	gs := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(gs, bareStreamer{})
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	fx.mu.Lock()
	fx.onClose = append(fx.onClose, func() { gs.Stop(); <-served })
	fx.mu.Unlock()
	return addr, ln.Addr().String(), nil
}

// bareStreamer answers each stream request with streamResponses messages
// shaped as square_int32's, built and sent as fast as gRPC allows: the
// floor of any server streaming them.
type bareStreamer struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (bareStreamer) ModelStreamInfer(st inference.GRPCInferenceService_ModelStreamInferServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		for range streamResponses {
			out := &inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
				ModelName: req.GetModelName(), ModelVersion: "1", Id: req.GetId(),
				Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUT", Datatype: "INT32", Shape: []int64{1}}},
				RawOutputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, streamResponses)},
			}}
			if err := st.Send(out); err != nil {
				return err
			}
		}
	}
}

// streamMany sends one request per op and reads its streamResponses
// responses (the final flag alone is not sent: no empty final response).
func streamMany(c inference.GRPCInferenceServiceClient) Worker {
	req := &inference.ModelInferRequest{
		ModelName:        "square_int32",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, streamResponses)},
	}
	return func(int) (Op, func(), error) {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.ModelStreamInfer(ctx)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		return func(full bool) error {
			if err := st.Send(req); err != nil {
				return err
			}
			for i := range streamResponses {
				r, err := st.Recv()
				if err != nil {
					return err
				}
				if r.GetErrorMessage() != "" {
					return fmt.Errorf("response %d: %s", i, r.GetErrorMessage())
				}
				if full || i == 0 {
					raw := r.GetInferResponse().GetRawOutputContents()
					if len(raw) != 1 || binary.LittleEndian.Uint32(raw[0]) != streamResponses {
						return fmt.Errorf("response %d: unexpected %v", i, r.GetInferResponse())
					}
				}
			}
			return nil
		}, func() { _ = st.CloseSend(); cancel() }, nil
	}
}

func wordsRequest(model string) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName:        model,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{append(binary.LittleEndian.AppendUint32(nil, 5), "token"...)},
	}
}

func checkWords(r *inference.ModelInferResponse) error {
	raw := r.GetRawOutputContents()
	if len(raw) != 1 || string(raw[0][4:]) != "token" {
		return fmt.Errorf("unexpected response %v", r)
	}
	return nil
}

// firstResponse sends one request per op on the worker's stream and waits
// for its first (and only) response.
func firstResponse(c inference.GRPCInferenceServiceClient) Worker {
	req := wordsRequest("text_words")
	return func(int) (Op, func(), error) {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.ModelStreamInfer(ctx)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		return func(bool) error {
			if err := st.Send(req); err != nil {
				return err
			}
			r, err := st.Recv()
			if err != nil {
				return err
			}
			if r.GetErrorMessage() != "" {
				return errors.New(r.GetErrorMessage())
			}
			return checkWords(r.GetInferResponse())
		}, func() { _ = st.CloseSend(); cancel() }, nil
	}
}

func unaryWords(c inference.GRPCInferenceServiceClient) Worker {
	req := wordsRequest("text_words_unary")
	return func(int) (Op, func(), error) {
		return func(bool) error {
			r, err := c.ModelInfer(context.Background(), req)
			if err != nil {
				return err
			}
			return checkWords(r)
		}, nil, nil
	}
}

// BenchmarkDecoupled: one op is one request. stream-1000 reads 1,000
// responses per op (req/s times 1,000 is responses/s); first is the time
// to the first response.
func BenchmarkDecoupled(b *testing.B) {
	addr, bare := decoupledFixture(b)
	c := inference.NewGRPCInferenceServiceClient(fx.conn(b, addr))
	cb := inference.NewGRPCInferenceServiceClient(fx.conn(b, bare))
	b.Run("stream-1000/c1", func(b *testing.B) {
		measurePair(b, "grpc-stream-1000/c1", "nereid-decoupled-1000/c1", 1, 2, streamMany(cb), streamMany(c))
	})
	b.Run("first/c1", func(b *testing.B) {
		measurePair(b, "nereid-unary-words/c1", "nereid-decoupled-first/c1", 1, warmSmall, unaryWords(c), firstResponse(c))
	})
}
