package bus

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Role is a kind of Nereid service as NATS sees it: one NATS user per role,
// whose permissions are the subjects that role uses and nothing more.
type Role string

// The service roles.
const (
	RoleGateway        Role = "gateway"
	RoleExecutor       Role = "executor"
	RoleSequenceRouter Role = "sequence-router"
	RoleShmRegistry    Role = "shm-registry"
)

// Roles lists every role, in the order configurations name them.
func Roles() []Role {
	return []Role{RoleGateway, RoleExecutor, RoleSequenceRouter, RoleShmRegistry}
}

// InboxPrefix is the inbox prefix connections of role use (nats.go's
// CustomInboxPrefix): replies to a role arrive under "_INBOX.<role>.", so
// that a role may listen to its own replies and to nobody else's.
func InboxPrefix(r Role) string { return "_INBOX." + Token(string(r)) }

// inboxWildcard matches every inbox of role r.
func inboxWildcard(r Role) string { return InboxPrefix(r) + ".>" }

// Why replies use per-role inboxes rather than NATS's response permissions
// (allow_responses) alone: a sequence request is answered by the executor
// the router handed it to, which never received the request from the
// gateway; a transfer in chunks answers on an inbox named in a header, not
// in the reply field; and a request may run longer than any response
// expiry a server can afford to track.
//
// So a reply subject says who may answer on it. A Conn's inboxes are
//
//	<InboxPrefix(role)>.<nuid>.<class>.<nonce>.<n>
//
// where class names the roles that answer (ReplyClass: the repliers of
// the request's route, or the peer a private inbox of a transfer is made
// for), nonce is random and n counts the Conn's inboxes. Each role may
// publish only under the classes it belongs to, in the inboxes of the
// roles it exchanges requests with (RolePermissions), and subscribe to
// its own inboxes only: an executor may answer a gateway's inference
// request, the shm-registry may not, whatever subject it learns. The
// requester accepts a message only on the exact subject of a request in
// flight (class and nonce included) and counts the others as forged
// (ForgedReplies); the nonce binds the reply to the one instance the
// request reached, which alone learnt it.

// Route is one family of subjects, written with NATS wildcards, and who
// uses it. The table below is the only statement of who may talk to whom:
// the NATS configuration in deploy/ is rendered from it (NATSAuthorization)
// and the end-to-end suites run under that configuration, so a service that
// starts using a subject its role is not granted here is refused by NATS.
type Route struct {
	// Pattern matches the subjects the builders in this package produce.
	Pattern string
	// Publishers publish on it or send requests to it.
	Publishers []Role
	// Subscribers listen on it or serve its requests.
	Subscribers []Role
	// Repliers answer its requests (the subscribers, or whoever they hand a
	// request to). Replies go to the requester's inbox of their class, and
	// a transfer in chunks runs both ways between the two inboxes, so
	// repliers may publish to the publishers' inboxes of the repliers'
	// class, and publishers to the repliers' inboxes of their own.
	Repliers []Role
}

var (
	gw   = []Role{RoleGateway}
	ex   = []Role{RoleExecutor}
	rt   = []Role{RoleSequenceRouter}
	reg  = []Role{RoleShmRegistry}
	none []Role
)

// routes is every subject family of the wire format; subjects built in this
// package must fall under one of them (TestEverySubjectHasARoute).
var routes = []Route{
	// Inference on executors: any executor of the model, those of a node,
	// and the one owning a GPU of that node. Executors send requests too:
	// Triton backends calling other models (BLS).
	{Pattern: inferPrefix + "*.*", Publishers: []Role{RoleGateway, RoleExecutor}, Subscribers: ex, Repliers: ex},
	{Pattern: inferPrefix + "*.*.node.*", Publishers: gw, Subscribers: ex, Repliers: ex},
	{Pattern: inferPrefix + "*.*.node.*.gpu.*", Publishers: gw, Subscribers: ex, Repliers: ex},
	// The catalog: heartbeats, solicitations and per-executor queries.
	// Executors read it as well, for the model queries of their backends.
	{Pattern: HeartbeatSubject, Publishers: ex, Subscribers: []Role{RoleGateway, RoleSequenceRouter, RoleExecutor}},
	{Pattern: SolicitSubject, Publishers: gw, Subscribers: ex},
	// The placement controller (in the sequence router's binary) reads
	// the catalogs too.
	{Pattern: execPrefix + "*.catalog", Publishers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter}, Subscribers: ex, Repliers: ex},
	// Placement: the controller tells one executor to load or unload;
	// gateways ask it to place a model no executor holds.
	{Pattern: execPrefix + "*.place", Publishers: rt, Subscribers: ex, Repliers: ex},
	{Pattern: PlacementSubject, Publishers: gw, Subscribers: rt, Repliers: rt},
	{Pattern: PlacementStateSubject, Publishers: gw, Subscribers: rt, Repliers: rt},
	{Pattern: PlacementPinSubject, Publishers: gw, Subscribers: rt, Repliers: rt},
	// Repository loads and unloads under placement: a gateway's, and
	// those a Triton backend asks of its executor.
	{Pattern: PlacementControlSubject, Publishers: []Role{RoleGateway, RoleExecutor}, Subscribers: rt, Repliers: rt},
	{Pattern: execPrefix + "*.stats", Publishers: gw, Subscribers: ex, Repliers: ex},
	// The statistics only gateways keep (the ensembles they ran, their
	// response cache): the gateway answering a statistics request gathers
	// every gateway's part.
	{Pattern: GatewayStatsSubject, Publishers: gw, Subscribers: gw, Repliers: gw},
	// Ensembles an executor runs whole: a gateway sends it the request.
	{Pattern: execPrefix + "*.ensemble", Publishers: gw, Subscribers: ex, Repliers: ex},
	// The admin API: a gateway asks an executor for its state and tells
	// it to drain; gateways and sequence routers announce themselves to
	// the gateways serving the API.
	{Pattern: execPrefix + "*.status", Publishers: gw, Subscribers: ex, Repliers: ex},
	{Pattern: execPrefix + "*.drain", Publishers: gw, Subscribers: ex, Repliers: ex},
	{Pattern: GatewayPresenceSubject, Publishers: gw, Subscribers: gw},
	// The response cache: a gateway that reloads a model tells the others
	// to drop its entries.
	{Pattern: ResponseCacheInvalidateSubject, Publishers: gw, Subscribers: gw},
	{Pattern: RouterPresenceSubject, Publishers: rt, Subscribers: gw},
	// Model control: a gateway (the repository API) or an executor (a
	// Triton backend loading or unloading a model) asks every executor to
	// load or unload.
	{Pattern: ModelControlSubject, Publishers: []Role{RoleGateway, RoleExecutor}, Subscribers: ex, Repliers: ex},
	// An executor starting in explicit mode asks the others what they
	// have loaded.
	{Pattern: LoadedModelsSubject, Publishers: ex, Subscribers: ex, Repliers: ex},
	// The set of models loaded through the repository API, in a JetStream
	// key-value bucket that executors read at start and write as they load
	// and unload (LoadedModelsBucket). JetStream itself answers: the
	// account's limits (read before creating a bucket), looking the bucket
	// up, creating it, listing its keys, reading a key, and the puts and
	// purges (on the keys' subjects) it acknowledges.
	{Pattern: jetStreamAPI + "INFO", Publishers: ex, Subscribers: none},
	{Pattern: jetStreamAPI + "STREAM.INFO." + loadedModelsStream, Publishers: ex, Subscribers: none},
	{Pattern: jetStreamAPI + "STREAM.CREATE." + loadedModelsStream, Publishers: ex, Subscribers: none},
	{Pattern: jetStreamAPI + "STREAM.MSG.GET." + loadedModelsStream, Publishers: ex, Subscribers: none},
	{Pattern: jetStreamAPI + "DIRECT.GET." + loadedModelsStream + ".>", Publishers: ex, Subscribers: none},
	{Pattern: loadedModelsKeys, Publishers: ex, Subscribers: none},
	// Cancellations travel from requesters to every Conn that serves
	// requests (gateways serve the settings subjects); the sequence router
	// forwards those of the requests it handed to executors.
	{Pattern: CancelSubject, Publishers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter},
		Subscribers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter, RoleShmRegistry}},
	// Liveness probes of requests in flight: every role that sends
	// requests asks every Conn that handles requests which of them it still
	// holds, naming them by an id that does not show their reply subjects.
	// The holder answers on the request's reply subject, which its role
	// may publish to already: it answers that request.
	{Pattern: AliveSubject, Publishers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter},
		Subscribers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter, RoleShmRegistry}},
	// Liveness pings of the singleton services; probes, not services, send
	// them.
	{Pattern: Prefix + ".svc.*.ping", Publishers: none, Subscribers: []Role{RoleSequenceRouter, RoleShmRegistry}},
	// The sequence router: requests from gateways (answered by the router
	// or, once batched, by the executor that ran them), pulls from
	// executors, lease claims and takeovers.
	{Pattern: SequenceInferWildcard, Publishers: gw, Subscribers: rt, Repliers: []Role{RoleSequenceRouter, RoleExecutor}},
	{Pattern: SequencePullWildcard, Publishers: ex, Subscribers: rt, Repliers: rt},
	{Pattern: SequenceClaimWildcard, Publishers: ex, Subscribers: rt},
	{Pattern: SequenceStatsWildcard, Publishers: gw, Subscribers: rt, Repliers: rt},
	{Pattern: SequenceTakeoverWildcard, Publishers: rt, Subscribers: []Role{RoleExecutor, RoleGateway}, Repliers: []Role{RoleExecutor, RoleGateway}},
	// The server API's queries of Triton backends (TRITONSERVER_Server*
	// metadata, config, statistics, index): executors ask any gateway.
	{Pattern: serverQueryPrefix + "*", Publishers: ex, Subscribers: gw, Repliers: gw},
	// Run-time settings (trace, logging): a gateway spreads a change to
	// every service, which acknowledges; a starting service asks a gateway
	// for the current settings.
	{Pattern: settingsPrefix + "*", Publishers: gw, Subscribers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter, RoleShmRegistry},
		Repliers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter, RoleShmRegistry}},
	{Pattern: settingsPrefix + "*.sync", Publishers: []Role{RoleGateway, RoleExecutor, RoleSequenceRouter, RoleShmRegistry}, Subscribers: gw, Repliers: gw},
	// The shared-memory registry and the executors that map regions.
	{Pattern: ShmRegisterSubject, Publishers: gw, Subscribers: reg, Repliers: reg},
	{Pattern: ShmUnregisterSubject, Publishers: gw, Subscribers: reg, Repliers: reg},
	{Pattern: ShmStatusSubject, Publishers: []Role{RoleGateway, RoleExecutor}, Subscribers: reg, Repliers: reg},
	{Pattern: ShmAcquireSubject, Publishers: gw, Subscribers: reg, Repliers: reg},
	{Pattern: ShmReleaseSubject, Publishers: gw, Subscribers: reg, Repliers: reg},
	{Pattern: shmPrefix + "removed.*", Publishers: reg, Subscribers: ex},
	{Pattern: shmPrefix + "cuda.*.*", Publishers: gw, Subscribers: ex, Repliers: ex},
}

// Routes returns the subject families and who uses them.
func Routes() []Route { return slices.Clone(routes) }

// Permissions are the subjects one role may publish and subscribe to.
type Permissions struct {
	Publish, Subscribe []string
}

// RolePermissions derives role's permissions from the routes: what it
// publishes and subscribes to, its own inboxes, and in the inboxes of the
// roles it exchanges requests and replies with, the classes of subjects it
// may answer on: as a replier, the requests of the route's publishers (the
// class of the route's repliers); as a publisher, the private inboxes the
// repliers open for it during a transfer (the class of its own role).
func RolePermissions(r Role) Permissions {
	pub := map[string]bool{}
	sub := map[string]bool{inboxWildcard(r): true}
	for _, rt := range routes {
		// A role may be on both sides (an executor's backend calling a
		// model on another executor): then it replies to its own role's
		// inboxes too.
		if slices.Contains(rt.Publishers, r) {
			pub[rt.Pattern] = true
			for _, p := range rt.Repliers {
				pub[classInboxes(p, roleClass(r))] = true
			}
		}
		if slices.Contains(rt.Subscribers, r) {
			sub[rt.Pattern] = true
		}
		if slices.Contains(rt.Repliers, r) {
			for _, p := range rt.Publishers {
				pub[classInboxes(p, replierClass(rt.Repliers))] = true
			}
		}
	}
	return Permissions{Publish: sortedKeys(pub), Subscribe: sortedKeys(sub)}
}

// classInboxes matches the inboxes of every Conn of role r made for class.
func classInboxes(r Role, class string) string { return InboxPrefix(r) + ".*." + class + ".>" }

// roleClass is the class of a private inbox made for a peer of role r.
func roleClass(r Role) string { return Token(string(r)) }

// replierClass is the class of the requests a set of roles answers: their
// names in the order of Roles, joined by '_', or "all".
func replierClass(rs []Role) string {
	if len(rs) == len(Roles()) {
		return "all"
	}
	var b strings.Builder
	for _, r := range Roles() {
		if slices.Contains(rs, r) {
			if b.Len() > 0 {
				b.WriteByte('_')
			}
			b.WriteString(Token(string(r)))
		}
	}
	return b.String()
}

// unroutedClass is the class of requests on subjects no route names: no
// role may answer them under the shipped configuration.
const unroutedClass = "none"

// replyClasses caches ReplyClass by subject (bounded: subjects name
// models and executors, a few per deployment).
var replyClasses sync.Map

const maxReplyClasses = 1 << 14

var replyClassCount atomic.Int64

// ReplyClass is the class of the reply subject of a request on subject:
// the roles that answer the requests of its route.
func ReplyClass(subject string) string {
	if v, ok := replyClasses.Load(subject); ok {
		return v.(string)
	}
	class := unroutedClass
	for _, rt := range routes {
		if len(rt.Repliers) > 0 && patternMatches(rt.Pattern, subject) {
			class = replierClass(rt.Repliers)
			break
		}
	}
	if replyClassCount.Load() < maxReplyClasses {
		if _, loaded := replyClasses.LoadOrStore(subject, class); !loaded {
			replyClassCount.Add(1)
		}
	}
	return class
}

// peerClass is the class of a private inbox made for the requester whose
// reply subject is reply: its role, the token after "_INBOX.".
func peerClass(reply string) string {
	rest, ok := strings.CutPrefix(reply, "_INBOX.")
	if !ok {
		return unroutedClass
	}
	if i := strings.IndexByte(rest, '.'); i > 0 {
		return rest[:i]
	}
	return unroutedClass
}

// patternMatches reports whether a literal subject falls under pattern
// (with NATS's * and >).
func patternMatches(pattern, subject string) bool {
	for {
		p, prest, pmore := strings.Cut(pattern, ".")
		if p == ">" {
			return subject != ""
		}
		s, srest, smore := strings.Cut(subject, ".")
		if p != "*" && p != s {
			return false
		}
		if !pmore || !smore {
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// PasswordEnv is the environment variable the rendered NATS configuration
// reads role's password from ("NEREID_NATS_GATEWAY_PASSWORD"), so that the
// configuration file holds no secret.
func PasswordEnv(r Role) string {
	return "NEREID_NATS_" + strings.ToUpper(strings.ReplaceAll(string(r), "-", "_")) + "_PASSWORD"
}

// NATSAuthorization renders nats-server's authorization block: one user per
// role, named after it, with its password taken from PasswordEnv(role) and
// the permissions RolePermissions derives. Anything not granted is refused.
func NATSAuthorization() string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, r := range Roles() {
		p := RolePermissions(r)
		fmt.Fprintf(&b, "    {\n      user: %q\n      password: $%s\n      permissions: {\n", string(r), PasswordEnv(r))
		writeList(&b, "publish", p.Publish)
		writeList(&b, "subscribe", p.Subscribe)
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeList(b *strings.Builder, name string, subjects []string) {
	fmt.Fprintf(b, "        %s: {\n          allow: [\n", name)
	for _, s := range subjects {
		fmt.Fprintf(b, "            %q\n", s)
	}
	b.WriteString("          ]\n        }\n")
}
