package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/kserve"
)

// NATS subjects of the baseline responders.
const (
	SubjectEchoTCP    = "bench.echo.tcp"    // echo responder on a TCP connection
	SubjectEchoInproc = "bench.echo.inproc" // echo responder on an in-process connection
	SubjectInfer      = "bench.infer"       // identity responder speaking ModelInferRequest/Response
	// SubjectInferRouted reaches the identity responder through a
	// forwarder on a connection of its own, which passes each request on
	// with the requester's reply subject: one NATS leg more, as a sequence
	// request takes through the sequence router.
	SubjectInferRouted = "bench.infer.routed"
)

// GRPC echo service, written by hand (no .proto): unary and bidirectional
// stream, both carrying a BytesValue, so the message is a real protobuf
// with one length-delimited field, as small as a gRPC payload gets.
const (
	EchoUnaryMethod  = "/nereid.bench.Echo/Unary"
	EchoStreamMethod = "/nereid.bench.Echo/Stream"
)

// EchoStreamDesc is the client-side description of the echo stream.
var EchoStreamDesc = grpc.StreamDesc{StreamName: "Stream", ServerStreams: true, ClientStreams: true}

var echoServiceDesc = grpc.ServiceDesc{
	ServiceName: "nereid.bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return in, nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Stream", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				in := new(wrapperspb.BytesValue)
				if err := stream.RecvMsg(in); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := stream.SendMsg(in); err != nil {
					return err
				}
			}
		},
	}},
}

// MaxMessage is the message-size limit every baseline server and client
// sets, so that 16 MiB (and 256 MiB) echoes are not refused.
const MaxMessage = 1 << 30

// Baselines are the bare transports and the architecture's floor, each a
// real server on loopback in this process.
type Baselines struct {
	NATS *server.Server
	// NATSTCP and NATSInproc are client connections for the bare
	// request-reply baselines, over TCP and in-process (net.Pipe) — the
	// standalone server wires its services with in-process connections.
	NATSTCP, NATSInproc *nats.Conn

	GRPCEchoAddr  string // bare grpc-go echo (unary and stream)
	HTTPEchoAddr  string // bare net/http echo
	ChainGRPCAddr string // GRPCInferenceService proxy: ModelInfer and ModelStreamInfer over NATS
	// RoutedGRPCAddr is the gRPC chain through the forwarder
	// (SubjectInferRouted): the floor of a sequence request.
	RoutedGRPCAddr string
	ChainHTTPAddr  string // HTTP proxy: request body over NATS and back
	// ProtocolHTTPAddr is the HTTP chain with the protocol's translation:
	// the proxy decodes KServe's request into the bus's message, the
	// executor's floor (inferResponder) answers it, and the proxy encodes
	// the answer as KServe's response.
	ProtocolHTTPAddr string

	conns   []*nats.Conn
	grpcs   []*grpc.Server
	https   []*http.Server
	closers []func()
}

// StartBaselines starts every baseline server. Close stops them.
func StartBaselines() (_ *Baselines, err error) {
	b := &Baselines{}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		MaxPayload: 64 << 20, // the 16 MiB NATS echo travels in one message
		MaxPending: 1 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	b.NATS = ns
	go ns.Start()
	b.closers = append(b.closers, func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("nats server did not start")
	}
	tcp := func(name string) (*nats.Conn, error) {
		c, err := nats.Connect(ns.ClientURL(), nats.Name(name))
		if err == nil {
			b.conns = append(b.conns, c)
		}
		return c, err
	}
	inproc := func(name string) (*nats.Conn, error) {
		c, err := nats.Connect("", nats.InProcessServer(ns), nats.Name(name))
		if err == nil {
			b.conns = append(b.conns, c)
		}
		return c, err
	}

	// Responders: the TCP one answers the TCP client, the in-process ones
	// answer the in-process client and the chain proxies.
	echo := func(m *nats.Msg) { _ = m.Respond(m.Data) }
	respTCP, err := tcp("responder-tcp")
	if err != nil {
		return nil, err
	}
	respInproc, err := inproc("responder")
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		c    *nats.Conn
		subj string
		h    nats.MsgHandler
	}{
		{respTCP, SubjectEchoTCP, echo},
		{respInproc, SubjectEchoInproc, echo},
		{respInproc, SubjectInfer, inferResponder},
	} {
		sub, err := s.c.Subscribe(s.subj, s.h)
		if err != nil {
			return nil, err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return nil, err
		}
	}
	for _, c := range []*nats.Conn{respTCP, respInproc} {
		if err := c.Flush(); err != nil {
			return nil, err
		}
	}
	if b.NATSTCP, err = tcp("client-tcp"); err != nil {
		return nil, err
	}
	if b.NATSInproc, err = inproc("client"); err != nil {
		return nil, err
	}

	// Bare gRPC echo.
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessage), grpc.MaxSendMsgSize(MaxMessage))
	gs.RegisterService(&echoServiceDesc, struct{}{})
	if b.GRPCEchoAddr, err = b.serveGRPC(gs); err != nil {
		return nil, err
	}

	// Bare HTTP echo.
	if b.HTTPEchoAddr, err = b.serveHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeBody(w, body)
	})); err != nil {
		return nil, err
	}

	// A gRPC chain proxy sending to subject, with its own in-process
	// connection, as the gateway has.
	grpcProxy := func(name, subject string) (string, error) {
		nc, err := inproc(name)
		if err != nil {
			return "", err
		}
		s := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessage), grpc.MaxSendMsgSize(MaxMessage))
		inference.RegisterGRPCInferenceServiceServer(s, &chainProxy{nc: nc, subject: subject})
		return b.serveGRPC(s)
	}
	// The chain client -gRPC-> proxy -NATS-> responder.
	if b.ChainGRPCAddr, err = grpcProxy("chain-grpc-proxy", SubjectInfer); err != nil {
		return nil, err
	}

	// The routed chain client -gRPC-> proxy -NATS-> forwarder -NATS->
	// responder, answered straight to the proxy.
	fwd, err := inproc("chain-forwarder")
	if err != nil {
		return nil, err
	}
	fsub, err := fwd.Subscribe(SubjectInferRouted, func(m *nats.Msg) {
		_ = fwd.PublishMsg(&nats.Msg{Subject: SubjectInfer, Reply: m.Reply, Data: m.Data})
	})
	if err != nil {
		return nil, err
	}
	if err := fsub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	if err := fwd.Flush(); err != nil {
		return nil, err
	}
	if b.RoutedGRPCAddr, err = grpcProxy("chain-routed-grpc-proxy", SubjectInferRouted); err != nil {
		return nil, err
	}

	// The chain client -HTTP-> proxy -NATS-> responder.
	httpConn, err := inproc("chain-http-proxy")
	if err != nil {
		return nil, err
	}
	if b.ChainHTTPAddr, err = b.serveHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msg, err := httpConn.Request(SubjectEchoInproc, body, 30*time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeBody(w, msg.Data)
	})); err != nil {
		return nil, err
	}

	// The protocol chain client -HTTP-> translating proxy -NATS-> executor floor.
	kserveConn, err := inproc("chain-kserve-proxy")
	if err != nil {
		return nil, err
	}
	if b.ProtocolHTTPAddr, err = b.serveHTTP(kserveProxy{nc: kserveConn}); err != nil {
		return nil, err
	}
	return b, nil
}

// kserveProxy is the floor of the gateway's HTTP side: KServe's request
// decoded into the bus's message (pkg/kserve, the gateway's codec), one
// NATS request-reply to inferResponder, the reply decoded and encoded as
// KServe's response, JSON or binary as the request asked. It does none of
// the gateway's checks against the model's configuration, and no
// statistics, tracing or cancellation.
type kserveProxy struct{ nc *nats.Conn }

func (p kserveProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	headerLen := len(body)
	if v := r.Header.Get("Inference-Header-Content-Length"); v != "" {
		if headerLen, err = kserve.ParseHeaderLength(v, len(body)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	req, opts, err := kserve.DecodeInferRequest(body, headerLen, "identity", "", kserve.DecodeOptions{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	data, err := proto.Marshal(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	msg, err := p.nc.Request(SubjectInfer, data, 30*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if e := msg.Header.Get("Bench-Error"); e != "" {
		http.Error(w, e, http.StatusInternalServerError)
		return
	}
	resp := new(inference.ModelInferResponse)
	if err := proto.Unmarshal(msg.Data, resp); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out, jsonLen, err := kserve.EncodeInferResponse(resp, opts)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	if jsonLen < len(out) {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Inference-Header-Content-Length", strconv.Itoa(jsonLen))
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

// Close stops every server and connection.
func (b *Baselines) Close() {
	for _, s := range b.grpcs {
		s.Stop()
	}
	for _, s := range b.https {
		_ = s.Close()
	}
	for _, c := range b.conns {
		c.Close()
	}
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

func (b *Baselines) serveGRPC(s *grpc.Server) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	b.grpcs = append(b.grpcs, s)
	go func() { _ = s.Serve(ln) }()
	return ln.Addr().String(), nil
}

func (b *Baselines) serveHTTP(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	b.https = append(b.https, s)
	go func() { _ = s.Serve(ln) }()
	return ln.Addr().String(), nil
}

// readBody reads a request body in one allocation when its length is known,
// which is what any server that needs the whole tensor has to do.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength >= 0 {
		buf := make([]byte, r.ContentLength)
		_, err := io.ReadFull(r.Body, buf)
		return buf, err
	}
	return io.ReadAll(r.Body)
}

func writeBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	_, _ = w.Write(body)
}

// inferResponder is the floor of an executor: decode Triton's request,
// answer with every input as the matching output (INPUTn -> OUTPUTn), the
// same messages and the same raw_* layout the gateway and executor use on
// the bus, with no validation, scheduling or backend call.
func inferResponder(m *nats.Msg) {
	req := new(inference.ModelInferRequest)
	if err := proto.Unmarshal(m.Data, req); err != nil {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set("Bench-Error", err.Error())
		_ = m.RespondMsg(reply)
		return
	}
	data, err := proto.Marshal(IdentityResponse(req))
	if err != nil {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set("Bench-Error", err.Error())
		_ = m.RespondMsg(reply)
		return
	}
	_ = m.Respond(data)
}

// IdentityResponse answers req the way an identity model does.
func IdentityResponse(req *inference.ModelInferRequest) *inference.ModelInferResponse {
	resp := &inference.ModelInferResponse{
		ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(), Id: req.GetId(),
		RawOutputContents: req.GetRawInputContents(),
	}
	for _, in := range req.GetInputs() {
		resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{
			Name:     strings.Replace(in.GetName(), "INPUT", "OUTPUT", 1),
			Datatype: in.GetDatatype(),
			Shape:    in.GetShape(),
		})
	}
	return resp
}

// chainProxy is the floor of a gateway: decode the gRPC request, re-encode
// it for the bus, one NATS request-reply, decode the reply, encode it for
// the client. Nothing in our architecture can do less for a unary call.
type chainProxy struct {
	inference.UnimplementedGRPCInferenceServiceServer
	nc      *nats.Conn
	subject string // SubjectInfer, or SubjectInferRouted
}

func (p *chainProxy) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return p.forward(ctx, req)
}

// ModelStreamInfer answers requests in order, one at a time, as a stream
// that keeps request order must.
func (p *chainProxy) ModelStreamInfer(stream inference.GRPCInferenceService_ModelStreamInferServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		out := &inference.ModelStreamInferResponse{}
		resp, err := p.forward(stream.Context(), req)
		if err != nil {
			out.ErrorMessage = err.Error()
		} else {
			out.InferResponse = resp
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

func (p *chainProxy) forward(_ context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := p.nc.Request(p.subject, data, 30*time.Second)
	if err != nil {
		return nil, err
	}
	if e := msg.Header.Get("Bench-Error"); e != "" {
		return nil, errors.New(e)
	}
	resp := new(inference.ModelInferResponse)
	if err := proto.Unmarshal(msg.Data, resp); err != nil {
		return nil, err
	}
	return resp, nil
}
