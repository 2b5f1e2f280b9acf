package gateway

import (
	"errors"
	"flag"

	"github.com/nereid-io/nereid/pkg/respcache"
	"github.com/nereid-io/nereid/pkg/tlsreload"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tritonflag"
	"github.com/nereid-io/nereid/pkg/tritonmetrics"
)

// EdgeFlags are tritonserver's TLS and restriction flags, shared by the
// gateway's and the standalone server's mains.
type EdgeFlags struct {
	grpc, http             tlsFlags
	httpRestr, grpcRestrct RestrictionFlag
	metrics                MetricsConfig
	trace                  tracesetting.Flag
	cache                  respcache.Flag
}

type tlsFlags struct {
	use, mutual     bool
	cert, key, root string
}

// MetricsConfig is tritonserver's --metrics-config: settings of the
// per-model metrics, given as <setting>=<value>.
type MetricsConfig = tritonmetrics.Config

// Register defines --grpc-use-ssl, --grpc-use-ssl-mutual,
// --grpc-server-cert, --grpc-server-key, --grpc-root-cert, their --http-*
// counterparts, --http-restricted-api and --grpc-restricted-protocol.
func (f *EdgeFlags) Register(fs *flag.FlagSet) {
	tritonflag.BoolVar(fs, &f.grpc.use, "grpc-use-ssl", false, "serve gRPC over TLS")
	tritonflag.BoolVar(fs, &f.grpc.mutual, "grpc-use-ssl-mutual", false, "serve gRPC over mutual TLS: clients must present a certificate signed by --grpc-root-cert")
	fs.StringVar(&f.grpc.cert, "grpc-server-cert", "", "PEM certificate of the gRPC endpoint (re-read when it changes)")
	fs.StringVar(&f.grpc.key, "grpc-server-key", "", "PEM private key of the gRPC endpoint (re-read when it changes)")
	fs.StringVar(&f.grpc.root, "grpc-root-cert", "", "PEM root certificate verifying gRPC clients' certificates")
	tritonflag.BoolVar(fs, &f.http.use, "http-use-ssl", false, "serve HTTPS")
	tritonflag.BoolVar(fs, &f.http.mutual, "http-use-ssl-mutual", false, "serve HTTPS with mutual TLS: clients must present a certificate signed by --http-root-cert")
	fs.StringVar(&f.http.cert, "http-server-cert", "", "PEM certificate of the HTTP endpoint (re-read when it changes)")
	fs.StringVar(&f.http.key, "http-server-key", "", "PEM private key of the HTTP endpoint (re-read when it changes)")
	fs.StringVar(&f.http.root, "http-root-cert", "", "PEM root certificate verifying HTTP clients' certificates")
	fs.Var(&f.httpRestr, "http-restricted-api", "restrict HTTP API groups to requests carrying a header: <api list>:<key>=<value> (repeatable)")
	fs.Var(&f.grpcRestrct, "grpc-restricted-protocol", "restrict gRPC API groups to calls carrying metadata triton-grpc-protocol-<key>: <api list>:<key>=<value> (repeatable)")
	fs.Var(&f.trace, "trace-config", "a trace setting: <setting>=<value> (level, rate, count, log_frequency, mode), triton,<setting>=<value> (file, log-frequency) or opentelemetry,<setting>=<value> (url, resource, ...) (repeatable)")
	fs.Var(&f.metrics, "metrics-config", tritonmetrics.FlagUsage)
	fs.Var(&f.cache, "cache-config", respcache.FlagUsage)
	fs.Func("response-cache-byte-size", "deprecated: --cache-config local,size=<bytes>", f.cache.SetByteSize)
}

func (t tlsFlags) files(name string) (*tlsreload.Files, error) {
	if !t.use && !t.mutual {
		if t.cert != "" || t.key != "" || t.root != "" {
			return nil, errors.New("--" + name + "-server-cert, -key and -root-cert need --" + name + "-use-ssl true")
		}
		return nil, nil
	}
	if t.cert == "" || t.key == "" {
		return nil, errors.New("--" + name + "-use-ssl needs --" + name + "-server-cert and --" + name + "-server-key")
	}
	if t.mutual && t.root == "" {
		return nil, errors.New("--" + name + "-use-ssl-mutual needs --" + name + "-root-cert")
	}
	return &tlsreload.Files{Cert: t.cert, Key: t.key, CA: t.root, Mutual: t.mutual}, nil
}

// Apply sets cfg's TLS and restriction fields from the flags.
func (f *EdgeFlags) Apply(cfg *Config) error {
	var err error
	if cfg.GRPCTLS, err = f.grpc.files("grpc"); err != nil {
		return err
	}
	if cfg.HTTPTLS, err = f.http.files("http"); err != nil {
		return err
	}
	cfg.HTTPRestricted, cfg.GRPCRestricted = f.httpRestr.R, f.grpcRestrct.R
	cfg.Metrics = f.metrics
	cfg.Trace = f.trace.Config()
	if cfg.ResponseCache, err = f.cache.Config(); err != nil {
		return err
	}
	return nil
}
