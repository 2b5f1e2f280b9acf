package gateway

import (
	"flag"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/nereid-io/nereid/pkg/tritonflag"
)

// Defaults of Limits.
const (
	DefaultHTTPMaxInflightBodySize = 1 << 30
	DefaultHTTPBodyMinRate         = 4 << 10
	DefaultHTTPBodyGrace           = 30 * time.Second
	DefaultGRPCMessageMinRate      = DefaultHTTPBodyMinRate
	DefaultGRPCMessageGrace        = DefaultHTTPBodyGrace
	DefaultHTTPReadHeaderTimeout   = 10 * time.Second
	DefaultHTTPIdleTimeout         = 2 * time.Minute
	// The gRPC keepalive defaults are Triton's (and gRPC core's).
	DefaultGRPCKeepaliveTime       = 2 * time.Hour
	DefaultGRPCKeepaliveTimeout    = 20 * time.Second
	DefaultGRPCMinRecvPingInterval = 5 * time.Minute
	DefaultGRPCMaxConnectionIdle   = 15 * time.Minute
	// DefaultGRPCMaxInputSize is --http-max-input-size's default: what a
	// compressed message may inflate to is bounded alike over both
	// protocols.
	DefaultGRPCMaxInputSize = DefaultHTTPMaxInputSize
	// DefaultGRPCMaxMessageSize is Triton's gRPC message size limit
	// (INT32_MAX), which is also the largest uncompressed HTTP infer body.
	DefaultGRPCMaxMessageSize = math.MaxInt32
)

// Limits bound what a client can make the gateway hold: request bodies in
// memory, and connections that are slow, idle or chatty. A zero value
// takes its default; a negative one turns the bound off.
type Limits struct {
	// HTTPMaxInflightBodySize is the budget of HTTP body bytes received by
	// all requests in flight; a body that would pass it while others hold
	// part of it is refused with UNAVAILABLE.
	HTTPMaxInflightBodySize int64
	// HTTPBodyMinRate (bytes/s) is the rate a body must keep up after
	// HTTPBodyGrace, or its connection is closed.
	HTTPBodyMinRate int64
	HTTPBodyGrace   time.Duration
	// GRPCMessageMinRate (bytes/s) is the rate a gRPC message must keep
	// up after GRPCMessageGrace from its first byte, while its client may
	// send (flow control allows), or its connection is closed (grpcrate.go).
	GRPCMessageMinRate int64
	GRPCMessageGrace   time.Duration
	// ShedIdleAt is the number of open descriptors from which the oldest
	// idle connections (HTTP between requests, gRPC with no call open) are
	// closed to make room for new ones (0: 90% of the soft RLIMIT_NOFILE;
	// negative: never).
	ShedIdleAt int
	// HTTPReadHeaderTimeout bounds the reading of a request's headers.
	HTTPReadHeaderTimeout time.Duration
	// HTTPIdleTimeout closes a keep-alive connection idle that long.
	HTTPIdleTimeout time.Duration
	// GRPCKeepaliveTime and GRPCKeepaliveTimeout: the server pings a
	// connection idle for the first and closes it when the ping is not
	// answered within the second (tritonserver --grpc-keepalive-time,
	// --grpc-keepalive-timeout).
	GRPCKeepaliveTime, GRPCKeepaliveTimeout time.Duration
	// GRPCKeepalivePermitWithoutCalls lets clients ping while they have no
	// call open; GRPCMinRecvPingInterval is the shortest interval between
	// their pings (tritonserver --grpc-keepalive-permit-without-calls,
	// --grpc-http2-min-recv-ping-interval-without-data). A client pinging
	// more often is sent GOAWAY.
	GRPCKeepalivePermitWithoutCalls bool
	GRPCMinRecvPingInterval         time.Duration
	// GRPCMaxConnectionIdle closes (GOAWAY) a connection with no call open
	// for that long; clients reconnect when they next call.
	GRPCMaxConnectionIdle time.Duration
	// GRPCMaxInputSize bounds a gRPC message after decompression: a
	// compressed message that would inflate beyond it is refused with
	// RESOURCE_EXHAUSTED as soon as its inflation passes it. Negative: only
	// GRPCMaxMessageSize applies.
	GRPCMaxInputSize int64
	// GRPCMaxMessageSize bounds gRPC messages as they are sent, both ways
	// (the largest is 2 GiB - 1, protobuf's and Triton's limit).
	GRPCMaxMessageSize int
}

// RegisterFlags defines the flags that fill l, with Triton's names and
// units (milliseconds) for the gRPC keepalive options Triton has.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&l.HTTPMaxInflightBodySize, "http-max-inflight-body-size", DefaultHTTPMaxInflightBodySize,
		"bytes of HTTP request bodies all requests in flight may hold; beyond it new bodies are refused (503) unless alone (negative: no limit)")
	fs.Int64Var(&l.HTTPBodyMinRate, "http-body-min-rate", DefaultHTTPBodyMinRate,
		"bytes per second an HTTP request body must keep up after --http-body-grace, or its connection is closed (negative: no minimum)")
	fs.DurationVar(&l.HTTPBodyGrace, "http-body-grace", DefaultHTTPBodyGrace, "time an HTTP request body gets before --http-body-min-rate applies")
	fs.Int64Var(&l.GRPCMessageMinRate, "grpc-message-min-rate", DefaultGRPCMessageMinRate,
		"bytes per second a gRPC message must keep up after --grpc-message-grace, while flow control lets its client send, or its connection is closed (negative: no minimum)")
	fs.DurationVar(&l.GRPCMessageGrace, "grpc-message-grace", DefaultGRPCMessageGrace, "time a gRPC message gets from its first byte before --grpc-message-min-rate applies")
	fs.IntVar(&l.ShedIdleAt, "shed-idle-connections-at", 0,
		"open file descriptors from which the oldest idle connections (HTTP between requests, gRPC with no call open) are closed to make room for new clients (0: 90% of the soft RLIMIT_NOFILE; negative: never)")
	fs.DurationVar(&l.HTTPReadHeaderTimeout, "http-read-header-timeout", DefaultHTTPReadHeaderTimeout, "time allowed to read an HTTP request's headers")
	fs.DurationVar(&l.HTTPIdleTimeout, "http-idle-timeout", DefaultHTTPIdleTimeout, "idle HTTP keep-alive connections are closed after this long (negative: never)")
	millis(fs, &l.GRPCKeepaliveTime, "grpc-keepalive-time", DefaultGRPCKeepaliveTime, "milliseconds a gRPC connection may be idle before the server pings it")
	millis(fs, &l.GRPCKeepaliveTimeout, "grpc-keepalive-timeout", DefaultGRPCKeepaliveTimeout, "milliseconds the server waits for a keepalive ping's answer before closing the connection")
	tritonflag.BoolVar(fs, &l.GRPCKeepalivePermitWithoutCalls, "grpc-keepalive-permit-without-calls", false, "let gRPC clients send keepalive pings while no call is open")
	millis(fs, &l.GRPCMinRecvPingInterval, "grpc-http2-min-recv-ping-interval-without-data", DefaultGRPCMinRecvPingInterval,
		"shortest interval in milliseconds between a gRPC client's pings; a client pinging more often is disconnected")
	fs.Int64Var(&l.GRPCMaxInputSize, "grpc-max-input-size", DefaultGRPCMaxInputSize,
		"largest gRPC message in bytes after decompression: a compressed message inflating beyond it is refused (negative: only --grpc-max-message-size)")
	fs.IntVar(&l.GRPCMaxMessageSize, "grpc-max-message-size", DefaultGRPCMaxMessageSize,
		"largest gRPC message in bytes as sent, received or answered (at most 2147483647)")
	fs.DurationVar(&l.GRPCMaxConnectionIdle, "grpc-max-connection-idle", DefaultGRPCMaxConnectionIdle, "gRPC connections with no call open for this long are closed (negative: never)")
}

// millis is a duration flag in integer milliseconds, as Triton's.
func millis(fs *flag.FlagSet, d *time.Duration, name string, def time.Duration, usage string) {
	*d = def
	fs.Func(name, usage+" (default "+def.String()+")", func(s string) error {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		*d = time.Duration(ms) * time.Millisecond
		return nil
	})
}

// withDefaults fills the zero values.
func (l Limits) withDefaults() Limits {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if l.HTTPMaxInflightBodySize == 0 {
		l.HTTPMaxInflightBodySize = DefaultHTTPMaxInflightBodySize
	}
	if l.GRPCMaxInputSize == 0 {
		l.GRPCMaxInputSize = DefaultGRPCMaxInputSize
	}
	if l.GRPCMaxMessageSize <= 0 || l.GRPCMaxMessageSize > DefaultGRPCMaxMessageSize {
		l.GRPCMaxMessageSize = DefaultGRPCMaxMessageSize
	}
	if l.HTTPBodyMinRate == 0 {
		l.HTTPBodyMinRate = DefaultHTTPBodyMinRate
	}
	def(&l.HTTPBodyGrace, DefaultHTTPBodyGrace)
	if l.GRPCMessageMinRate == 0 {
		l.GRPCMessageMinRate = DefaultGRPCMessageMinRate
	}
	def(&l.GRPCMessageGrace, DefaultGRPCMessageGrace)
	def(&l.HTTPReadHeaderTimeout, DefaultHTTPReadHeaderTimeout)
	def(&l.HTTPIdleTimeout, DefaultHTTPIdleTimeout)
	def(&l.GRPCKeepaliveTime, DefaultGRPCKeepaliveTime)
	def(&l.GRPCKeepaliveTimeout, DefaultGRPCKeepaliveTimeout)
	def(&l.GRPCMinRecvPingInterval, DefaultGRPCMinRecvPingInterval)
	def(&l.GRPCMaxConnectionIdle, DefaultGRPCMaxConnectionIdle)
	return l
}

// off maps "negative: off" to the zero that net/http and grpc-go read as
// no limit.
func off(d time.Duration) time.Duration { return max(d, 0) }

// grpcOptions are the gRPC server's keepalive settings, message size
// limits and buffer pool.
func (l Limits) grpcOptions() []grpc.ServerOption {
	idle := off(l.GRPCMaxConnectionIdle)
	if idle == 0 {
		idle = time.Duration(1<<63 - 1) // grpc-go's "infinity"
	}
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: idle,
			Time:              off(l.GRPCKeepaliveTime),
			Timeout:           off(l.GRPCKeepaliveTimeout),
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             off(l.GRPCMinRecvPingInterval),
			PermitWithoutStream: l.GRPCKeepalivePermitWithoutCalls,
		}),
		grpc.MaxRecvMsgSize(l.GRPCMaxMessageSize),
		grpc.MaxSendMsgSize(l.GRPCMaxMessageSize),
		// Received frames and decompressed messages are held in buffers of
		// a pool that keeps few, and no large ones (grpcpool.go).
		experimental.BufferPool(newGRPCBufferPool()),
	}
}
