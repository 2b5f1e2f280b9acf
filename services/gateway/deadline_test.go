package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// held is what the executor saw of one request it held until its context
// ended.
type held struct {
	deadline    time.Time
	hasDeadline bool
	err         error
}

// TestInferDeadlinesAndCancellation: an infer request carries to the
// executor the client's deadline (gRPC's grpc-timeout) or else the
// gateway's RequestTimeout, ends there when it passes, and ends there when
// the client goes away (a cancelled gRPC call, a closed HTTP connection),
// while the client hears why.
func TestInferDeadlinesAndCancellation(t *testing.T) {
	ns := startNATS(t)
	const requestTimeout = 400 * time.Millisecond
	g := startGateway(t, ns, func(c *Config) { c.RequestTimeout = requestTimeout })
	ex := newFakeExecutor(t, ns, "ex1", &busv1.ModelVersionState{Name: "simple", Version: "1", State: "READY", Config: simpleConfig("simple")})
	entered, seen := make(chan struct{}, 1), make(chan held, 1)
	ex.hold = func(ctx context.Context) error {
		d, ok := ctx.Deadline()
		entered <- struct{}{}
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
		seen <- held{deadline: d, hasDeadline: ok, err: ctx.Err()}
		return tritonerr.Unavailablef("held until %v", ctx.Err())
	}
	ex.start()
	waitModelReady(t, g, "simple")
	c, _ := grpcClient(t, g)
	req := &inference.ModelInferRequest{ModelName: "simple", Id: "r1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{int32sLE(in0), int32sLE(in1)}}

	for _, tc := range []struct {
		name string
		// call sends the request and, once the executor holds it, ends it
		// as the case says; it returns the client's error and the
		// deadline the client set (zero: none).
		call func(t *testing.T) (error, time.Time)
		// executor is how the request's context may end at the executor;
		// client checks what the client heard.
		executor []error
		client   func(err error) bool
	}{
		{"gRPC client cancels", func(t *testing.T) (error, time.Time) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { _, err := c.ModelInfer(ctx, req); errc <- err }()
			<-entered
			cancel()
			return <-errc, time.Time{}
		}, []error{context.Canceled}, func(err error) bool { return status.Code(err) == codes.Canceled }},

		{"gRPC client's deadline", func(t *testing.T) (error, time.Time) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			d, _ := ctx.Deadline()
			errc := make(chan error, 1)
			go func() { _, err := c.ModelInfer(ctx, req); errc <- err }()
			<-entered
			return <-errc, d
			// The client's end may be seen first as the client's (it
			// resets the stream: cancelled), or the executor's answer
			// at the deadline may reach the client first.
		}, []error{context.DeadlineExceeded, context.Canceled}, func(err error) bool {
			return status.Code(err) == codes.DeadlineExceeded || strings.Contains(err.Error(), "held until")
		}},

		{"gRPC without a deadline: the gateway's", func(t *testing.T) (error, time.Time) {
			errc := make(chan error, 1)
			start := time.Now()
			go func() { _, err := c.ModelInfer(context.Background(), req); errc <- err }()
			<-entered
			return <-errc, start.Add(requestTimeout)
			// The gateway gives up at its deadline, or hears the
			// executor's answer at the same deadline first.
		}, []error{context.DeadlineExceeded}, func(err error) bool {
			return status.Code(err) == codes.Unavailable && (strings.Contains(err.Error(), "timed out") || strings.Contains(err.Error(), "held until"))
		}},

		{"HTTP client goes away", func(t *testing.T) (error, time.Time) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, err := http.NewRequestWithContext(ctx, "POST", "http://"+g.HTTPAddr()+"/v2/models/simple/infer", bytes.NewReader([]byte(simpleRequestJSON(""))))
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(r)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-entered
			cancel()
			return <-errc, time.Time{}
		}, []error{context.Canceled}, func(err error) bool { return errors.Is(err, context.Canceled) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, clientDeadline := tc.call(t)
			h := <-seen
			if !slices.ContainsFunc(tc.executor, func(e error) bool { return errors.Is(h.err, e) }) {
				t.Errorf("the executor's context ended with %v, want one of %v", h.err, tc.executor)
			}
			if !tc.client(err) {
				t.Errorf("the client heard %v", err)
			}
			switch {
			case clientDeadline.IsZero():
			case !h.hasDeadline:
				t.Error("no deadline reached the executor")
			case h.deadline.Before(clientDeadline.Add(-time.Second)) || h.deadline.After(clientDeadline.Add(time.Second)):
				t.Errorf("the executor's deadline %v is not the request's, about %v", h.deadline, clientDeadline)
			}
		})
	}
}
