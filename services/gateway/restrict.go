package gateway

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// APIGroup is one of Triton's groups of endpoints that
// --http-restricted-api and --grpc-restricted-protocol restrict.
type APIGroup string

// Triton's API groups.
const (
	APIHealth          APIGroup = "health"
	APIMetadata        APIGroup = "metadata"
	APIInference       APIGroup = "inference"
	APISharedMemory    APIGroup = "shared-memory"
	APIModelConfig     APIGroup = "model-config"
	APIModelRepository APIGroup = "model-repository"
	APIStatistics      APIGroup = "statistics"
	APITrace           APIGroup = "trace"
	APILogging         APIGroup = "logging"
	// APIAdmin is Nereid's cluster admin API (api/adminv1), served on its
	// own ports.
	APIAdmin APIGroup = "admin"
)

// APIGroups lists every group.
func APIGroups() []APIGroup {
	return []APIGroup{APIHealth, APIMetadata, APIInference, APISharedMemory, APIModelConfig,
		APIModelRepository, APIStatistics, APITrace, APILogging, APIAdmin}
}

// grpcRestrictedPrefix starts the metadata key a gRPC client sends for a
// restriction, as Triton: key "k" is sent as "triton-grpc-protocol-k".
const grpcRestrictedPrefix = "triton-grpc-protocol-"

// Restriction is the header a request to a restricted group must carry,
// with its value.
type Restriction struct {
	Header, Value string
}

// Restrictions maps restricted groups to the header they require. The
// zero value restricts nothing.
type Restrictions map[APIGroup]Restriction

// RestrictionFlag is a repeatable flag value in Triton's form
// "<api>,<api>:<header>=<value>". It never prints the values it holds.
type RestrictionFlag struct {
	R Restrictions
}

func (f *RestrictionFlag) String() string {
	if f == nil || len(f.R) == 0 {
		return ""
	}
	var names []string
	for g := range f.R {
		names = append(names, string(g))
	}
	sort.Strings(names)
	return strings.Join(names, ",") + ":…"
}

// Set parses one restriction and adds it.
func (f *RestrictionFlag) Set(spec string) error {
	if f.R == nil {
		f.R = Restrictions{}
	}
	return f.R.Add(spec)
}

// Add parses "<api list>:<key>=<value>" and restricts each group listed.
// A group may be restricted once; the value may contain '=' and ':'.
func (rs Restrictions) Add(spec string) error {
	apis, kv, ok := strings.Cut(spec, ":")
	if !ok || apis == "" {
		return fmt.Errorf("restricted API %q: want <api list>:<header>=<value>", redactSpec(spec))
	}
	key, value, ok := strings.Cut(kv, "=")
	if !ok || key == "" {
		return fmt.Errorf("restricted API %q: want <api list>:<header>=<value>", redactSpec(spec))
	}
	if value == "" {
		// An empty value would let through any request that sends the
		// header empty: no secret at all.
		return fmt.Errorf("restricted API %q: the value of header %q is empty; give the secret the header must carry", redactSpec(spec), key)
	}
	for _, a := range strings.Split(apis, ",") {
		g := APIGroup(strings.TrimSpace(a))
		known := false
		for _, k := range APIGroups() {
			known = known || k == g
		}
		if !known {
			return fmt.Errorf("restricted API: unknown API %q (one of %s)", g, groupNames())
		}
		if _, dup := rs[g]; dup {
			return fmt.Errorf("restricted API: %q is given more than once", g)
		}
		rs[g] = Restriction{Header: key, Value: value}
	}
	return nil
}

func groupNames() string {
	var s []string
	for _, g := range APIGroups() {
		s = append(s, string(g))
	}
	return strings.Join(s, ", ")
}

// redactSpec keeps the part of a spec before '=' for error messages.
func redactSpec(spec string) string {
	if i := strings.IndexByte(spec, '='); i >= 0 {
		return spec[:i] + "=…"
	}
	return spec
}

// allowed reports whether value is what restriction r requires, comparing
// in constant time so that timing does not reveal how much of a guess was
// right.
func (r Restriction) allowed(values []string) bool {
	ok := 0
	for _, v := range values {
		ok |= subtle.ConstantTimeCompare([]byte(v), []byte(r.Value))
	}
	return ok == 1
}

// httpAPIGroup names the group of an HTTP path, "" for none (not found).
func httpAPIGroup(path string) APIGroup {
	switch {
	case path == "/v2":
		return APIMetadata
	case strings.HasPrefix(path, "/v2/health/"):
		return APIHealth
	case strings.HasPrefix(path, "/v2/repository/"):
		return APIModelRepository
	case strings.HasPrefix(path, "/v2/systemsharedmemory"), strings.HasPrefix(path, "/v2/cudasharedmemory"):
		return APISharedMemory
	case path == "/v2/trace/setting":
		return APITrace
	case path == "/v2/logging":
		return APILogging
	case path == "/v2/models/stats":
		return APIStatistics
	case strings.HasPrefix(path, "/v1/admin/"):
		return APIAdmin
	}
	rest, ok := strings.CutPrefix(path, "/v2/models/")
	if !ok || rest == "" {
		return ""
	}
	parts := strings.Split(rest, "/")
	// MODEL[/versions/V][/KIND...]
	parts = parts[1:]
	if len(parts) >= 2 && parts[0] == "versions" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return APIMetadata
	}
	switch parts[0] {
	case "ready":
		return APIHealth
	case "config":
		return APIModelConfig
	case "stats":
		return APIStatistics
	case "infer", "generate", "generate_stream":
		return APIInference
	case "trace":
		return APITrace
	}
	return ""
}

// restrictHTTP answers requests to restricted groups that lack their header
// with Triton's 403 and message, and passes the rest to next.
func restrictHTTP(rs Restrictions, next http.Handler) http.Handler {
	if len(rs) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rule, ok := rs[httpAPIGroup(r.URL.Path)]; ok && !rule.allowed(r.Header.Values(rule.Header)) {
			writeError(w, httpError(http.StatusForbidden, "This API is restricted, expecting header '"+rule.Header+"'"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// grpcAPIGroups maps gRPC methods to their group.
var grpcAPIGroups = map[string]APIGroup{
	"/inference.GRPCInferenceService/ServerLive":                   APIHealth,
	"/inference.GRPCInferenceService/ServerReady":                  APIHealth,
	"/inference.GRPCInferenceService/ModelReady":                   APIHealth,
	"/grpc.health.v1.Health/Check":                                 APIHealth,
	"/grpc.health.v1.Health/Watch":                                 APIHealth,
	"/inference.GRPCInferenceService/ServerMetadata":               APIMetadata,
	"/inference.GRPCInferenceService/ModelMetadata":                APIMetadata,
	"/inference.GRPCInferenceService/ModelInfer":                   APIInference,
	"/inference.GRPCInferenceService/ModelStreamInfer":             APIInference,
	"/inference.GRPCInferenceService/ModelConfig":                  APIModelConfig,
	"/inference.GRPCInferenceService/ModelStatistics":              APIStatistics,
	"/inference.GRPCInferenceService/RepositoryIndex":              APIModelRepository,
	"/inference.GRPCInferenceService/RepositoryModelLoad":          APIModelRepository,
	"/inference.GRPCInferenceService/RepositoryModelUnload":        APIModelRepository,
	"/inference.GRPCInferenceService/SystemSharedMemoryStatus":     APISharedMemory,
	"/inference.GRPCInferenceService/SystemSharedMemoryRegister":   APISharedMemory,
	"/inference.GRPCInferenceService/SystemSharedMemoryUnregister": APISharedMemory,
	"/inference.GRPCInferenceService/CudaSharedMemoryStatus":       APISharedMemory,
	"/inference.GRPCInferenceService/CudaSharedMemoryRegister":     APISharedMemory,
	"/inference.GRPCInferenceService/CudaSharedMemoryUnregister":   APISharedMemory,
	"/inference.GRPCInferenceService/TraceSetting":                 APITrace,
	"/inference.GRPCInferenceService/LogSettings":                  APILogging,
}

// grpcRestricted returns Triton's UNAVAILABLE status when the call to
// method lacks its group's header, nil when it may proceed.
func grpcRestricted(rs Restrictions, md metadata.MD, method string) error {
	group := grpcAPIGroups[method]
	if strings.HasPrefix(method, adminGRPCPrefix) {
		group = APIAdmin
	}
	rule, ok := rs[group]
	if !ok {
		return nil
	}
	key := strings.ToLower(grpcRestrictedPrefix + rule.Header)
	if rule.allowed(md.Get(key)) {
		return nil
	}
	return status.Error(codes.Unavailable, "This protocol is restricted, expecting header '"+key+"'")
}

// restrictedOptions are the interceptors that refuse calls lacking their
// group's restriction metadata; none when nothing is restricted.
func restrictedOptions(rs Restrictions) []grpc.ServerOption {
	if len(rs) == 0 {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if err := grpcRestricted(rs, md, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}), grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if err := grpcRestricted(rs, md, info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	})}
}
