package bus

// ExecutorPlaceSubject is where executor id, started under placement
// (--placement), answers busv1.ModelControlRequest from the placement
// controller with busv1.ModelControlReply: it loads or unloads the model on
// itself alone, whatever its model control mode, and records nothing in
// the loaded-model set (the controller's decisions are not the repository
// API's): "nereid.v1.exec.<Token(id)>.place".
func ExecutorPlaceSubject(id string) string {
	return execPrefix + Token(id) + ".place"
}

// PlacementSubject is where the placement controller leading the cluster
// answers busv1.PlacementDemand from gateways (a request for a model that
// no executor holds) with busv1.PlacementDemandReply once the model is
// placed or cannot be: "nereid.v1.placement.demand".
const PlacementSubject = Prefix + ".placement.demand"

// PlacementStateSubject is where the placement controller leading the
// cluster answers adminv1.GetPlacementRequest from a gateway's admin API
// with adminv1.Placement, its view and latest decisions:
// "nereid.v1.placement.state".
const PlacementStateSubject = Prefix + ".placement.state"

// PlacementPinSubject is where the placement controller leading the
// cluster answers adminv1.PinModelRequest from a gateway's admin API (the
// executors a model is pinned to; none removes its pin) with
// adminv1.Placement, its view with the pins: "nereid.v1.placement.pin".
const PlacementPinSubject = Prefix + ".placement.pin"

// PlacementControlSubject is where the placement controller leading the
// cluster answers busv1.ModelControlRequest from a gateway's repository
// API under placement (a load or unload for the whole cluster) with
// busv1.ModelControlReply once the model is placed and READY, or unloaded
// everywhere, or why not: "nereid.v1.placement.control".
const PlacementControlSubject = Prefix + ".placement.control"
