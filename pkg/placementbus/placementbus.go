// Package placementbus is placement's side of the bus: the typed clients
// the placement controller uses to read an executor's catalog and to tell
// one executor to load or unload a model (bus.ExecutorPlaceSubject), and
// the one gateways use to ask the controller to place a model no executor
// holds (bus.PlacementSubject). Subjects come from pkg/bus; callers never
// build them. The decisions themselves are pkg/placement's.
package placementbus

import (
	"context"

	"github.com/nereid-io/nereid/api/adminv1"
	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Executors talks to executors started under placement.
type Executors struct{ c *bus.Conn }

// NewExecutors returns the client over c.
func NewExecutors(c *bus.Conn) *Executors { return &Executors{c: c} }

// Catalog asks executor id for its catalog.
func (x *Executors) Catalog(ctx context.Context, id string) (*busv1.ExecutorCatalog, error) {
	var cat busv1.ExecutorCatalog
	if err := x.c.Request(ctx, bus.ExecutorCatalogSubject(id), &busv1.CatalogRequest{}, &cat); err != nil {
		return nil, err
	}
	return &cat, nil
}

// Load tells executor id to load model and returns its catalog after the
// load; a load that failed there returns the executor's error (a
// tritonerr.Error) with the catalog.
func (x *Executors) Load(ctx context.Context, id, model string) (*busv1.ExecutorCatalog, error) {
	return x.control(ctx, id, &busv1.ModelControlRequest{Name: model, Load: true})
}

// LoadWith is Load with the configuration and files of req (the
// repository API's override of a model's config.pbtxt and files); req
// names the model.
func (x *Executors) LoadWith(ctx context.Context, id string, req *busv1.ModelControlRequest) (*busv1.ExecutorCatalog, error) {
	return x.control(ctx, id, &busv1.ModelControlRequest{Name: req.GetName(), Load: true, Config: req.GetConfig(), Files: req.GetFiles()})
}

// Unload tells executor id to unload model; requests it received finish
// first.
func (x *Executors) Unload(ctx context.Context, id, model string) (*busv1.ExecutorCatalog, error) {
	return x.control(ctx, id, &busv1.ModelControlRequest{Name: model})
}

func (x *Executors) control(ctx context.Context, id string, req *busv1.ModelControlRequest) (*busv1.ExecutorCatalog, error) {
	var reply busv1.ModelControlReply
	if err := x.c.Request(ctx, bus.ExecutorPlaceSubject(id), req, &reply); err != nil {
		return nil, err
	}
	if reply.GetError() != "" {
		return reply.GetCatalog(), tritonerr.New(tritonerr.ParseKind(reply.GetErrorKind()), "%s", reply.GetError())
	}
	return reply.GetCatalog(), nil
}

// Controller talks to the placement controller leading the cluster.
type Controller struct{ c *bus.Conn }

// NewController returns the client over c.
func NewController(c *bus.Conn) *Controller { return &Controller{c: c} }

// Demand asks the controller to place model, which no executor holds, and
// waits (bounded by ctx) until it is placed: the executors holding it, or
// an UNAVAILABLE error saying why it was not placed.
func (x *Controller) Demand(ctx context.Context, model string) ([]string, error) {
	var reply busv1.PlacementDemandReply
	if err := x.c.Request(ctx, bus.PlacementSubject, &busv1.PlacementDemand{Model: model}, &reply); err != nil {
		return nil, err
	}
	if len(reply.GetExecutors()) == 0 {
		return nil, tritonerr.Unavailablef("model '%s' is placed on no executor: %s", model, reply.GetReason())
	}
	return reply.GetExecutors(), nil
}

// Pin asks the controller leading placement to pin model to executors
// (none: remove its pin) and returns its view with the pins; UNAVAILABLE
// when no controller leads.
func (x *Controller) Pin(ctx context.Context, model string, executors []string) (*adminv1.Placement, error) {
	var st adminv1.Placement
	if err := x.c.Request(ctx, bus.PlacementPinSubject, &adminv1.PinModelRequest{Model: model, Executors: executors}, &st); err != nil {
		if bus.IsNoResponders(err) {
			return nil, errNoController
		}
		return nil, err
	}
	return &st, nil
}

// Control sends a repository load or unload to the controller leading
// placement, which performs it for the whole cluster: the model placed
// and READY (or unloaded everywhere) before it answers. The reply carries
// the error a client gets, as an executor's does; UNAVAILABLE when no
// controller leads.
func (x *Controller) Control(ctx context.Context, req *busv1.ModelControlRequest) (*busv1.ModelControlReply, error) {
	var reply busv1.ModelControlReply
	if err := x.c.Request(ctx, bus.PlacementControlSubject, req, &reply); err != nil {
		if bus.IsNoResponders(err) {
			return nil, errNoController
		}
		return nil, err
	}
	return &reply, nil
}

// errNoController answers the admin API when no controller leads.
var errNoController = tritonerr.Unavailablef("no placement controller leads: start the sequence routers with --placement true (docs/placement.md)")

// State asks the controller leading placement for its view and latest
// decisions; UNAVAILABLE when no controller leads.
func (x *Controller) State(ctx context.Context) (*adminv1.Placement, error) {
	var st adminv1.Placement
	if err := x.c.Request(ctx, bus.PlacementStateSubject, &adminv1.GetPlacementRequest{}, &st); err != nil {
		if bus.IsNoResponders(err) {
			return nil, errNoController
		}
		return nil, err
	}
	return &st, nil
}
