package gateway

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestLimitsFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Limits
	}{
		{"defaults", nil, Limits{
			HTTPMaxInflightBodySize: DefaultHTTPMaxInflightBodySize, HTTPBodyMinRate: DefaultHTTPBodyMinRate, HTTPBodyGrace: DefaultHTTPBodyGrace,
			GRPCMessageMinRate: DefaultGRPCMessageMinRate, GRPCMessageGrace: DefaultGRPCMessageGrace,
			HTTPReadHeaderTimeout: DefaultHTTPReadHeaderTimeout, HTTPIdleTimeout: DefaultHTTPIdleTimeout,
			GRPCKeepaliveTime: DefaultGRPCKeepaliveTime, GRPCKeepaliveTimeout: DefaultGRPCKeepaliveTimeout,
			GRPCMinRecvPingInterval: DefaultGRPCMinRecvPingInterval, GRPCMaxConnectionIdle: DefaultGRPCMaxConnectionIdle,
			GRPCMaxInputSize: DefaultGRPCMaxInputSize, GRPCMaxMessageSize: DefaultGRPCMaxMessageSize}},
		{"Triton's millisecond flags and ours", []string{
			"--grpc-keepalive-time", "1500", "--grpc-keepalive-timeout", "250", "--grpc-http2-min-recv-ping-interval-without-data", "10000",
			"--grpc-keepalive-permit-without-calls", "true", "--grpc-max-connection-idle", "-1s",
			"--http-max-inflight-body-size", "-1", "--http-body-min-rate", "100", "--http-body-grace", "2s",
			"--http-read-header-timeout", "3s", "--http-idle-timeout", "4s",
			"--grpc-max-input-size", "1048576", "--grpc-max-message-size", "4194304",
			"--grpc-message-min-rate", "-1", "--grpc-message-grace", "5s", "--shed-idle-connections-at", "900"}, Limits{
			HTTPMaxInflightBodySize: -1, HTTPBodyMinRate: 100, HTTPBodyGrace: 2 * time.Second,
			GRPCMessageMinRate: -1, GRPCMessageGrace: 5 * time.Second, ShedIdleAt: 900,
			HTTPReadHeaderTimeout: 3 * time.Second, HTTPIdleTimeout: 4 * time.Second,
			GRPCKeepaliveTime: 1500 * time.Millisecond, GRPCKeepaliveTimeout: 250 * time.Millisecond, GRPCKeepalivePermitWithoutCalls: true,
			GRPCMinRecvPingInterval: 10 * time.Second, GRPCMaxConnectionIdle: -time.Second,
			GRPCMaxInputSize: 1 << 20, GRPCMaxMessageSize: 4 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var l Limits
			l.RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if l != tc.want {
				t.Fatalf("got %+v\nwant %+v", l, tc.want)
			}
		})
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var l Limits
	l.RegisterFlags(fs)
	if err := fs.Parse([]string{"--grpc-keepalive-time", "2h"}); err == nil {
		t.Fatal("a duration where Triton takes milliseconds was accepted")
	}
	// Zero values take the defaults; negative ones turn bounds off.
	d := Limits{HTTPIdleTimeout: -1, HTTPMaxInflightBodySize: -1, GRPCMaxInputSize: -1}.withDefaults()
	if d.HTTPBodyGrace != DefaultHTTPBodyGrace || off(d.HTTPIdleTimeout) != 0 || d.HTTPMaxInflightBodySize != -1 ||
		d.GRPCMaxInputSize != -1 || d.GRPCMaxMessageSize != DefaultGRPCMaxMessageSize {
		t.Fatalf("withDefaults: %+v", d)
	}
}
