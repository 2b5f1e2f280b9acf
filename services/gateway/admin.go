package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The cluster admin API (api/adminv1): gRPC on Config.AdminAddr, REST
// through grpc-gateway on Config.AdminHTTPAddr, both off by default and
// restricted like the other endpoints (API group "admin"); beyond loopback
// a restriction or mutual TLS is required (checkAdminExposure). The gateway
// answers from what the bus tells it: executors are asked one by one
// (bus.ExecutorStatusSubject, bus.ExecutorDrainSubject), gateways and
// sequence routers are known from the presence they announce every
// heartbeat interval, regions from the shm-registry.

// adminCallTimeout bounds one executor's answer.
const adminCallTimeout = 5 * time.Second

// adminGRPCPrefix starts the full method names of the admin service.
const adminGRPCPrefix = "/" + "nereid.admin.v1.Admin" + "/"

type adminService struct {
	adminv1.UnimplementedAdminServer
	g       *Gateway
	routers presenceTable[*adminv1.SequenceRouter]
}

// presenceTable keeps the latest announcement of each process of one kind,
// forgetting those not heard from for bus.HeartbeatExpiry and those that
// withdrew.
type presenceTable[T proto.Message] struct {
	mu   sync.Mutex
	last map[string]presenceEntry[T]
}

type presenceEntry[T any] struct {
	v  T
	at time.Time
}

// put records v from process id at now, or forgets id when it withdrew.
// It reports whether id was not in the table.
func (p *presenceTable[T]) put(id string, v T, withdraw bool, now time.Time) bool {
	if id == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if withdraw {
		delete(p.last, id)
		return false
	}
	if p.last == nil {
		p.last = map[string]presenceEntry[T]{}
	}
	_, known := p.last[id]
	p.last[id] = presenceEntry[T]{v: v, at: now}
	return !known
}

// list returns the processes heard from within expiry before now, by id.
func (p *presenceTable[T]) list(now time.Time, expiry time.Duration) []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.last))
	for id, e := range p.last {
		if now.Sub(e.at) > expiry {
			delete(p.last, id)
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]T, 0, len(ids))
	for _, id := range ids {
		out = append(out, p.last[id].v)
	}
	return out
}

// presence is this gateway's announcement.
func (g *Gateway) presence(withdraw bool) *adminv1.Gateway {
	return &adminv1.Gateway{
		Id: g.id, Node: g.cfg.Node, ServerId: g.cfg.ServerID, Version: g.cfg.Version,
		HttpAddress: g.HTTPAddr(), GrpcAddress: g.GRPCAddr(), MetricsAddress: g.MetricsAddr(),
		AdminAddress: g.AdminAddr(), AdminHttpAddress: g.AdminHTTPAddr(),
		StartedUnixMs: g.started.UnixMilli(), Executors: int64(len(g.cat.executorIDs())), Withdraw: withdraw,
	}
}

// announce publishes the gateway's presence; nothing once it has
// withdrawn (shutting down: the others stop waiting for its statistics).
func (g *Gateway) announce(withdraw bool) {
	g.presenceMu.Lock()
	defer g.presenceMu.Unlock()
	if g.withdrawn {
		return
	}
	g.withdrawn = withdraw
	if err := g.bus.Publish(bus.GatewayPresenceSubject, g.presence(withdraw)); err != nil {
		g.log.Debug("presence not published", "err", err)
	}
}

// followGateways listens to the presence of the other gateways, which
// every gateway keeps: the admin API lists them, and the statistics wait
// for their parts (gatewayStats). A gateway heard from for the first time
// is answered with this one's presence, so that it knows this one at once
// rather than a heartbeat interval later.
func (g *Gateway) followGateways() (*bus.Subscription, error) {
	return g.bus.Subscribe(bus.GatewayPresenceSubject, func(_ context.Context, data []byte) {
		var p adminv1.Gateway
		if proto.Unmarshal(data, &p) != nil || p.GetId() == g.id {
			return
		}
		if g.gateways.put(p.GetId(), &p, p.GetWithdraw(), time.Now()) {
			g.announce(false)
		}
	})
}

// followPresence listens to the presence of sequence routers.
func (a *adminService) followPresence() ([]*bus.Subscription, error) {
	rts, err := a.g.bus.Subscribe(bus.RouterPresenceSubject, func(_ context.Context, data []byte) {
		var p adminv1.SequenceRouter
		if proto.Unmarshal(data, &p) == nil {
			a.routers.put(p.GetId(), &p, p.GetWithdraw(), time.Now())
		}
	})
	if err != nil {
		return nil, err
	}
	return []*bus.Subscription{rts}, nil
}

func (a *adminService) ListGateways(context.Context, *adminv1.ListGatewaysRequest) (*adminv1.ListGatewaysResponse, error) {
	list := a.g.gateways.list(time.Now(), bus.HeartbeatExpiry)
	// This gateway is listed from its own state, announced or not yet.
	self := a.g.presence(false)
	list = slices.DeleteFunc(list, func(p *adminv1.Gateway) bool { return p.GetId() == self.GetId() })
	list = append(list, self)
	slices.SortFunc(list, func(x, y *adminv1.Gateway) int { return strings.Compare(x.GetId(), y.GetId()) })
	return &adminv1.ListGatewaysResponse{Gateways: list}, nil
}

func (a *adminService) ListExecutors(ctx context.Context, _ *adminv1.ListExecutorsRequest) (*adminv1.ListExecutorsResponse, error) {
	ids := a.g.cat.executorIDs()
	slices.Sort(ids)
	execs := make([]*adminv1.Executor, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
			defer cancel()
			e := &adminv1.Executor{}
			if errs[i] = a.g.bus.Request(cctx, bus.ExecutorStatusSubject(id), &busv1.CatalogRequest{}, e); errs[i] == nil {
				execs[i] = e
			}
		})
	}
	wg.Wait()
	resp := &adminv1.ListExecutorsResponse{}
	for i, id := range ids {
		if errs[i] != nil {
			resp.Unreachable = append(resp.Unreachable, &adminv1.Unreachable{Id: id, Error: errs[i].Error()})
			continue
		}
		resp.Executors = append(resp.Executors, execs[i])
	}
	return resp, nil
}

func (a *adminService) ListSequenceRouters(context.Context, *adminv1.ListSequenceRoutersRequest) (*adminv1.ListSequenceRoutersResponse, error) {
	return &adminv1.ListSequenceRoutersResponse{Routers: a.routers.list(time.Now(), bus.HeartbeatExpiry)}, nil
}

func (a *adminService) ListShmRegions(ctx context.Context, _ *adminv1.ListShmRegionsRequest) (*adminv1.ListShmRegionsResponse, error) {
	byNode := map[string]*adminv1.ShmNode{}
	var nodes []*adminv1.ShmNode
	for _, kind := range []busv1.ShmKind{busv1.ShmKind_SHM_KIND_SYSTEM, busv1.ShmKind_SHM_KIND_CUDA} {
		regions, err := a.g.shmStatus(ctx, kind, "")
		if err != nil {
			return nil, err
		}
		for _, r := range regions {
			n := byNode[r.GetNode()]
			if n == nil {
				n = &adminv1.ShmNode{Node: r.GetNode()}
				byNode[r.GetNode()] = n
				nodes = append(nodes, n)
			}
			n.Regions = append(n.Regions, shmRegionInfo(r))
		}
	}
	slices.SortFunc(nodes, func(x, y *adminv1.ShmNode) int { return strings.Compare(x.GetNode(), y.GetNode()) })
	for _, n := range nodes {
		slices.SortFunc(n.Regions, func(x, y *adminv1.ShmRegion) int { return strings.Compare(x.GetName(), y.GetName()) })
	}
	return &adminv1.ListShmRegionsResponse{Nodes: nodes}, nil
}

// shmRegionInfo is a registered region as the admin API lists it (its CUDA
// handle left out).
func shmRegionInfo(r *busv1.ShmRegion) *adminv1.ShmRegion {
	out := &adminv1.ShmRegion{Name: r.GetName(), ByteSize: r.GetByteSize(), AwaitingUnregister: r.GetAwaitingUnregister()}
	switch r.GetKind() {
	case busv1.ShmKind_SHM_KIND_CUDA:
		out.Kind, out.DeviceId = "cuda", r.GetDeviceId()
	default:
		out.Kind, out.Key, out.Offset = "system", r.GetKey(), r.GetOffset()
	}
	return out
}

func (a *adminService) DrainExecutor(ctx context.Context, req *adminv1.DrainExecutorRequest) (*adminv1.DrainStatus, error) {
	return a.drain(ctx, req.GetExecutorId(), drainStart)
}

func (a *adminService) UndrainExecutor(ctx context.Context, req *adminv1.UndrainExecutorRequest) (*adminv1.DrainStatus, error) {
	return a.drain(ctx, req.GetExecutorId(), drainUndo)
}

func (a *adminService) GetDrainStatus(ctx context.Context, req *adminv1.GetDrainStatusRequest) (*adminv1.DrainStatus, error) {
	return a.drain(ctx, req.GetExecutorId(), drainReport)
}

// drainAction is what a drain request asks of an executor besides its
// status.
type drainAction int

const (
	drainReport drainAction = iota // nothing: the status only
	drainStart                     // start draining
	drainUndo                      // undo the drain
)

// drain asks executor id for its drain status, after starting or undoing
// its drain as act says.
func (a *adminService) drain(ctx context.Context, id string, act drainAction) (*adminv1.DrainStatus, error) {
	if id == "" {
		return nil, tritonerr.InvalidArgf("executor_id is required")
	}
	ctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	st := &adminv1.DrainStatus{}
	err := a.g.bus.Request(ctx, bus.ExecutorDrainSubject(id), &busv1.ExecutorDrainRequest{Start: act == drainStart, Undrain: act == drainUndo}, st)
	if noResponders(err) {
		return nil, tritonerr.NotFoundf("no executor '%s' in the constellation", id)
	}
	if err != nil {
		return nil, err
	}
	a.placedDrain(id, st) // placement.go
	return st, nil
}

// checkAdminExposure refuses admin listeners reachable from other
// machines whose callers nothing authenticates: the admin API drains
// executors, so beyond loopback each endpoint needs the "admin" group
// restricted on its protocol (--grpc-restricted-protocol,
// --http-restricted-api) or mutual TLS (its clients present a
// certificate), as the embedded NATS server of the standalone binary
// needs its passwords beyond loopback.
func checkAdminExposure(cfg Config, grpcLn, httpLn net.Listener) error {
	for _, ep := range []struct {
		ln         net.Listener
		proto      string
		restricted bool
		mutual     bool
		restrict   string
	}{
		{grpcLn, "gRPC", cfg.GRPCRestricted[APIAdmin] != (Restriction{}), cfg.GRPCTLS != nil && cfg.GRPCTLS.Mutual,
			"--grpc-restricted-protocol admin:<header>=<value> (nereidctl --restricted <header>=<value>), --grpc-use-ssl-mutual true"},
		{httpLn, "REST", cfg.HTTPRestricted[APIAdmin] != (Restriction{}), cfg.HTTPTLS != nil && cfg.HTTPTLS.Mutual,
			"--http-restricted-api admin:<header>=<value>, --http-use-ssl-mutual true"},
	} {
		if ep.ln == nil || ep.restricted || ep.mutual || loopbackListener(ep.ln) {
			continue
		}
		return fmt.Errorf("gateway: the admin API (%s) on %s is reachable from other machines and nothing authenticates its callers: "+
			"restrict it or require client certificates (%s), or bind it to loopback (--admin-address 127.0.0.1, the default)",
			ep.proto, ep.ln.Addr(), ep.restrict)
	}
	return nil
}

// loopbackListener reports whether ln accepts only connections from this
// machine.
func loopbackListener(ln net.Listener) bool {
	a, ok := ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// adminHTTPHandler serves the REST mappings (snake_case JSON, as the
// proto names them, every field present).
func (a *adminService) adminHTTPHandler() (http.Handler, error) {
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}))
	if err := adminv1.RegisterAdminHandlerServer(context.Background(), mux, a); err != nil {
		return nil, fmt.Errorf("admin REST: %w", err)
	}
	return mux, nil
}

// noResponders reports a bus error that says nobody listens on the subject.
func noResponders(err error) bool {
	if err == nil {
		return false
	}
	te := tritonerr.From(err)
	return te.Kind == tritonerr.Unavailable && strings.Contains(te.Msg, "no responders")
}
