package bus

// Subjects of the cluster admin API (api/adminv1), served by gateways
// started with an admin port: the gateway asks each executor for its state
// and tells it to drain, and learns the gateways and sequence routers from
// their presence announcements.

const presencePrefix = Prefix + ".presence."

// GatewayPresenceSubject carries adminv1.Gateway, published by every
// gateway each HeartbeatInterval (withdraw=true on shutdown); every
// gateway listens, for the admin API and to know which gateways to wait
// for when it gathers their statistics (GatewayStatsSubject).
const GatewayPresenceSubject = presencePrefix + "gateway"

// RouterPresenceSubject carries adminv1.SequenceRouter, published by every
// sequence router each HeartbeatInterval with the models whose lease it
// holds (withdraw=true on shutdown); gateways serving the admin API listen.
const RouterPresenceSubject = presencePrefix + "sequence-router"

// ExecutorStatusSubject is where executor id answers busv1.CatalogRequest
// with adminv1.Executor (its models, instances, GPUs, requests in flight
// and drain state): "nereid.v1.exec.<Token(id)>.status".
func ExecutorStatusSubject(id string) string {
	return execPrefix + Token(id) + ".status"
}

// ExecutorDrainSubject is where executor id answers
// busv1.ExecutorDrainRequest with adminv1.DrainStatus, starting its drain
// when asked: "nereid.v1.exec.<Token(id)>.drain".
func ExecutorDrainSubject(id string) string {
	return execPrefix + Token(id) + ".drain"
}
