package gateway

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/modelconfig"
)

// Requests whose executor is lost. A stateless request (neither a
// sequence's nor a decoupled model's: those go through the sequence router
// or a stream) whose executor dies or is cut off while it holds it fails by
// the bus's liveness probes with UNAVAILABLE: it may or may not have run.
// Its outputs depend on its inputs alone, so running it again on another
// executor of the model gives the answer it would have had, and Triton's
// clients, which do not retry, get that answer instead of an error. The
// gateway does so at most LostRequestReruns times, within the request's
// deadline, for a model whose backend cannot take an executor down (see
// reruns); a model opts in or out with its parameter
// rerun_on_executor_loss (modelconfig.RerunOnExecutorLoss). When no other
// executor serves the model, the loss is the answer.

// DefaultLostRequestReruns is Config.LostRequestReruns's default: a rerun
// can itself land on an executor that is gone but not yet forgotten by
// NATS (one cut off by a partition keeps its subscriptions until NATS's
// pings give up on it), and the second one finds a live one.
const DefaultLostRequestReruns = 2

// rerunsOf is how many times a request of vv whose executor was lost runs
// again.
func (g *Gateway) rerunsOf(vv *versionView) int {
	if g.cfg.LostRequestReruns <= 0 {
		return 0
	}
	if reruns(vv) {
		return g.cfg.LostRequestReruns
	}
	return 0
}

// reruns decides whether a request of vv whose executor was lost may run
// again: as the model's rerun_on_executor_loss parameter says, else only
// where every executor holding it runs it in Go. A Triton C backend's
// fault ends its executor with every request in it, and the request lost
// may be the one that crashed it: run elsewhere, it would crash that
// executor too, and the next, one query taking the constellation down. A
// Go backend's panic fails only its batch, so such a loss is never the
// request's doing.
func reruns(vv *versionView) bool {
	switch r, _ := modelconfig.RerunOnExecutorLoss(vv.config); r {
	case modelconfig.RerunAlways:
		return true
	case modelconfig.RerunNever:
		return false
	}
	return !vv.native
}

// send sends req on subject and takes the reply into resp. When the
// hand-off cannot happen (this node's executors went away, or one that
// claims this node does not share its /dev/shm: the request was not run)
// the inputs are put back and the request goes over the bus to any
// executor of the model. When the executor holding it was lost, it runs
// again (see above) on the same subject: its tensors' hand-off or its
// shared-memory regions' node still decide where it may run. Under
// placement, a request that no executor takes has its model placed again
// on demand, once, and goes to the executor that then holds it.
func (g *Gateway) send(ctx context.Context, hs *handoffState, vv *versionView, subject string, req *inference.ModelInferRequest, resp proto.Message) error {
	var (
		lost   error // the last loss, when the request was lost before
		undone bool  // the hand-off was undone: the bus carries the inputs
		placed bool  // the model was placed again on demand
		reruns = -1  // reruns left; -1: not yet known (rerunsOf)
	)
	for {
		err := g.bus.Request(ctx, subject, req, resp)
		switch {
		case err == nil:
			return nil
		case bus.IsNoResponders(err) && !undone && hs.out != nil && hs.out.Undo(req):
			undone = true
			subject = bus.InferSubject(req.GetModelName(), req.GetModelVersion())
		case bus.IsNoResponders(err) && g.cfg.Placement && !placed && ctx.Err() == nil:
			// Under placement, nobody serving a model the catalog lists
			// means the executors holding it went away (the catalog
			// forgets them only when their heartbeats expire) or
			// unloaded it: the controller, which watches them, places
			// it again, and the request, not run, goes to the new one.
			placed = true
			pctx, cancel := g.placementWait(ctx)
			derr := g.demand(pctx, req.GetModelName())
			cancel()
			if derr != nil {
				if lost != nil {
					return lost
				}
				return err
			}
		case bus.IsNoResponders(err) && lost != nil:
			// Nobody else serves the model: the loss is the answer.
			return lost
		case bus.IsResponderLost(err) && ctx.Err() == nil:
			if reruns < 0 {
				reruns = g.rerunsOf(vv)
			}
			if reruns == 0 {
				return err
			}
			reruns--
			lost = err
			g.reruns.WithLabelValues(req.GetModelName()).Inc()
			g.log.Warn("the executor holding a request was lost; running the request again on another executor",
				"model", req.GetModelName(), "version", req.GetModelVersion(), "request_id", req.GetId(), "reruns_left", reruns)
		default:
			return err
		}
	}
}

// rerunCounter is nereid_requests_rerun: stateless requests run again
// because the executor holding them was lost, by model.
func rerunCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nereid_requests_rerun",
		Help: "Stateless requests run again on another executor because the executor holding them was lost, by model",
	}, []string{"model"})
}
