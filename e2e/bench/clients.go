package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nereid-io/nereid/api/inference"
)

// DialGRPC opens a client connection with the same options for every
// target (baseline or Nereid), so only the server differs.
func DialGRPC(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage), grpc.MaxCallSendMsgSize(MaxMessage)))
}

// NewHTTPClient keeps one idle keep-alive connection per worker.
func NewHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}}
}

// FP32Payload is n bytes (a multiple of 4) of little-endian float32 values
// that JSON can carry exactly (multiples of 0.25 below 256).
func FP32Payload(n int) []byte {
	b := make([]byte, n/4*4)
	for i := 0; i < len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(i/4%1024)*0.25))
	}
	return b
}

// FP32JSON writes payload's float32 values as a JSON array body.
func FP32JSON(payload []byte) []byte {
	out := make([]byte, 0, len(payload)*2+2)
	out = append(out, '[')
	for i := 0; i < len(payload); i += 4 {
		if i > 0 {
			out = append(out, ',')
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(payload[i:]))
		out = strconv.AppendFloat(out, float64(f), 'g', -1, 32)
	}
	return append(out, ']')
}

// sameBytes checks got against want: in full, or (in the timed loop) the
// length plus 64 evenly spaced bytes and both ends.
func sameBytes(got, want []byte, full bool) error {
	if len(got) != len(want) {
		return fmt.Errorf("answer has %d bytes, want %d", len(got), len(want))
	}
	if full || len(want) <= 256 {
		if !bytes.Equal(got, want) {
			return fmt.Errorf("answer differs from the request")
		}
		return nil
	}
	step := len(want) / 64
	for i := 0; i < len(want); i += step {
		if got[i] != want[i] {
			return fmt.Errorf("answer differs from the request at byte %d", i)
		}
	}
	if !bytes.Equal(got[:8], want[:8]) || !bytes.Equal(got[len(got)-8:], want[len(want)-8:]) {
		return fmt.Errorf("answer differs from the request at its ends")
	}
	return nil
}

// GRPCEchoUnary calls the bare echo's unary method.
func GRPCEchoUnary(cc *grpc.ClientConn, payload []byte) Worker {
	return func(int) (Op, func(), error) {
		in := &wrapperspb.BytesValue{Value: payload}
		return func(full bool) error {
			out := new(wrapperspb.BytesValue)
			if err := cc.Invoke(context.Background(), EchoUnaryMethod, in, out); err != nil {
				return err
			}
			return sameBytes(out.GetValue(), payload, full)
		}, nil, nil
	}
}

// GRPCEchoStream sends and receives one message at a time on the worker's
// own bidirectional stream.
func GRPCEchoStream(cc *grpc.ClientConn, payload []byte) Worker {
	return func(int) (Op, func(), error) {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := cc.NewStream(ctx, &EchoStreamDesc, EchoStreamMethod)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		in := &wrapperspb.BytesValue{Value: payload}
		return func(full bool) error {
				if err := st.SendMsg(in); err != nil {
					return err
				}
				out := new(wrapperspb.BytesValue)
				if err := st.RecvMsg(out); err != nil {
					return err
				}
				return sameBytes(out.GetValue(), payload, full)
			}, func() {
				_ = st.CloseSend()
				cancel()
			}, nil
	}
}

// NATSRequest is a bare request-reply to an echo responder.
func NATSRequest(nc *nats.Conn, subject string, payload []byte) Worker {
	return func(int) (Op, func(), error) {
		return func(full bool) error {
			msg, err := nc.Request(subject, payload, 30*time.Second)
			if err != nil {
				return err
			}
			return sameBytes(msg.Data, payload, full)
		}, nil, nil
	}
}

// checkInferResponse checks an identity model's answer to a request with
// one input.
func checkInferResponse(resp *inference.ModelInferResponse, want []byte, full bool) error {
	if n := len(resp.GetRawOutputContents()); n != 1 {
		return fmt.Errorf("answer has %d raw outputs, want 1", n)
	}
	if full {
		if n := len(resp.GetOutputs()); n != 1 || resp.GetOutputs()[0].GetName() != "OUTPUT0" {
			return fmt.Errorf("answer's outputs are %v, want OUTPUT0", resp.GetOutputs())
		}
	}
	return sameBytes(resp.GetRawOutputContents()[0], want, full)
}

// InferUnary calls ModelInfer (Nereid's gateway or the chain's proxy).
func InferUnary(c inference.GRPCInferenceServiceClient, req *inference.ModelInferRequest) Worker {
	want := req.GetRawInputContents()[0]
	return func(int) (Op, func(), error) {
		return func(full bool) error {
			resp, err := c.ModelInfer(context.Background(), req)
			if err != nil {
				return err
			}
			return checkInferResponse(resp, want, full)
		}, nil, nil
	}
}

// InferStream sends one request at a time on the worker's own
// ModelStreamInfer stream and waits for its answer.
func InferStream(c inference.GRPCInferenceServiceClient, req *inference.ModelInferRequest) Worker {
	want := req.GetRawInputContents()[0]
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
				resp, err := st.Recv()
				if err != nil {
					return err
				}
				if resp.GetErrorMessage() != "" {
					return fmt.Errorf("stream error: %s", resp.GetErrorMessage())
				}
				return checkInferResponse(resp.GetInferResponse(), want, full)
			}, func() {
				_ = st.CloseSend()
				cancel()
			}, nil
	}
}

// HTTPCheck checks an HTTP answer (status already 200). Each worker gets
// its own, so a check may remember what its first, fully checked answer
// looked like.
type HTTPCheck func(h http.Header, body []byte, full bool) error

// HTTPPost posts body to url with header and checks each answer with a
// check from newCheck. The response is read into a buffer the worker
// reuses, as a client that cares about speed does.
func HTTPPost(client *http.Client, url string, header http.Header, body []byte, newCheck func() HTTPCheck) Worker {
	return func(int) (Op, func(), error) {
		check := newCheck()
		var buf []byte
		return func(full bool) error {
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return err
			}
			for k, v := range header {
				req.Header[k] = v
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.ContentLength >= 0 {
				if cap(buf) < int(resp.ContentLength) {
					buf = make([]byte, resp.ContentLength)
				}
				buf = buf[:resp.ContentLength]
				if _, err := io.ReadFull(resp.Body, buf); err != nil {
					return err
				}
			} else {
				b := bytes.NewBuffer(buf[:0])
				if _, err := b.ReadFrom(resp.Body); err != nil {
					return err
				}
				buf = b.Bytes()
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, buf)
			}
			return check(resp.Header, buf, full)
		}, nil, nil
	}
}

// EchoCheck wants the request body back.
func EchoCheck(want []byte) func() HTTPCheck {
	return func() HTTPCheck {
		return func(_ http.Header, body []byte, full bool) error { return sameBytes(body, want, full) }
	}
}

// jsonOutput is the part of a KServe v2 JSON answer the checks read.
type jsonOutput struct {
	Outputs []struct {
		Name       string         `json:"name"`
		Datatype   string         `json:"datatype"`
		Shape      []int64        `json:"shape"`
		Data       []float32      `json:"data"`
		Parameters map[string]any `json:"parameters"`
	} `json:"outputs"`
}

// BinaryInferCheck wants a binary-data answer (Inference-Header-Content-
// Length) whose single output is want.
func BinaryInferCheck(want []byte) func() HTTPCheck {
	return func() HTTPCheck {
		return func(h http.Header, body []byte, full bool) error {
			n, err := strconv.Atoi(h.Get("Inference-Header-Content-Length"))
			if err != nil || n < 0 || n > len(body) {
				return fmt.Errorf("answer's Inference-Header-Content-Length %q is not a header length within its %d bytes", h.Get("Inference-Header-Content-Length"), len(body))
			}
			if full {
				var out jsonOutput
				if err := json.Unmarshal(body[:n], &out); err != nil {
					return fmt.Errorf("answer's JSON header: %w", err)
				}
				if len(out.Outputs) != 1 || out.Outputs[0].Name != "OUTPUT0" {
					return fmt.Errorf("answer's outputs: %.300s", body[:n])
				}
				if size, _ := out.Outputs[0].Parameters["binary_data_size"].(float64); int(size) != len(want) {
					return fmt.Errorf("answer's binary_data_size is %v, want %d", out.Outputs[0].Parameters["binary_data_size"], len(want))
				}
			}
			return sameBytes(body[n:], want, full)
		}
	}
}

// JSONInferCheck wants a JSON answer whose single output holds want's
// float32 values. Parsing megabytes of JSON costs far more than the server
// took, so the timed loop checks the answer against the first one, which
// was parsed and compared in full (the JSON of one tensor is always the same).
func JSONInferCheck(want []byte) func() HTTPCheck {
	return func() HTTPCheck {
		var first []byte
		return func(_ http.Header, body []byte, full bool) error {
			if !full && first != nil {
				return sameBytes(body, first, false)
			}
			var out jsonOutput
			if err := json.Unmarshal(body, &out); err != nil {
				return fmt.Errorf("answer's JSON: %w", err)
			}
			if len(out.Outputs) != 1 || out.Outputs[0].Name != "OUTPUT0" {
				return fmt.Errorf("answer has outputs %d, want OUTPUT0", len(out.Outputs))
			}
			data := out.Outputs[0].Data
			if len(data)*4 != len(want) {
				return fmt.Errorf("answer has %d values, want %d", len(data), len(want)/4)
			}
			for i, f := range data {
				if math.Float32bits(f) != binary.LittleEndian.Uint32(want[4*i:]) {
					return fmt.Errorf("answer's value %d is %v", i, f)
				}
			}
			first = bytes.Clone(body)
			return nil
		}
	}
}
