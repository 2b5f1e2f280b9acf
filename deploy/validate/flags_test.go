package validate

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository root, seen from this package's directory.
const repoRoot = "../.."

// cmdDir maps an image's SERVICE build argument (deploy/docker/Dockerfile) to
// the directory of the main it builds.
func cmdDir(service string) string {
	switch service {
	case "standalone":
		return filepath.Join(repoRoot, "services/standalone/cmd/nereid")
	case "nereidctl": // shipped in the gateway and executor images
		return filepath.Join(repoRoot, "services/gateway/cmd/nereidctl")
	}
	return filepath.Join(repoRoot, "services", service, "cmd", service)
}

// flagDefiners are the flag.FlagSet methods (and tritonflag functions) that
// define a flag; the flag's name is the call's first string literal argument.
var flagDefiners = map[string]bool{
	"Bool": true, "BoolVar": true, "BoolFunc": true,
	"String": true, "StringVar": true, "Int": true, "IntVar": true,
	"Int64": true, "Int64Var": true, "Uint": true, "UintVar": true,
	"Uint64": true, "Uint64Var": true, "Float64": true, "Float64Var": true,
	"Duration": true, "DurationVar": true, "Var": true, "Func": true, "TextVar": true,
	"SecretVar": true,
}

// mainFlags reads the flags a main defines from its source with go/parser:
// calls like fs.String("name", ...), fs.Var(&v, "name", ...) and
// tritonflag.Bool(fs, "name", ...), where fs came from flag.NewFlagSet. The
// value is true for Go's own boolean flags, which take no value (tritonflag's
// booleans do, as tritonserver's).
func mainFlags(t *testing.T, dir string) map[string]bool {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", dir, err)
	}
	flags := map[string]bool{}
	for _, pkg := range pkgs {
		// Receivers that define flags: the flag and tritonflag packages and
		// every variable assigned from flag.NewFlagSet.
		recv := map[string]bool{"flag": true, "tritonflag": true}
		ast.Inspect(pkg, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || len(as.Lhs) != len(as.Rhs) {
				return true
			}
			for i, rhs := range as.Rhs {
				if call, ok := rhs.(*ast.CallExpr); ok && isSel(call.Fun, "flag", "NewFlagSet") {
					if id, ok := as.Lhs[i].(*ast.Ident); ok {
						recv[id.Name] = true
					}
				}
			}
			return true
		})
		collectFlags(pkg, recv, flags)
		// Flags that shared packages define for the mains that use them:
		// a Register(fs *flag.FlagSet) method in an imported Nereid package.
		for _, f := range pkg.Files {
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if rest, ok := strings.CutPrefix(path, "github.com/nereid-io/nereid/"); ok {
					registerFlags(t, filepath.Join(repoRoot, rest), flags)
				}
			}
		}
	}
	if len(flags) == 0 {
		t.Fatalf("no flags found in %s: has the main moved its flags elsewhere?", dir)
	}
	return flags
}

// collectFlags adds the flags defined under n by calls on recv.
func collectFlags(n ast.Node, recv, flags map[string]bool) {
	ast.Inspect(n, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !flagDefiners[sel.Sel.Name] {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok || !recv[x.Name] {
			return true
		}
		for _, arg := range call.Args {
			if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, err := strconv.Unquote(lit.Value)
				if err == nil {
					goBool := x.Name != "tritonflag" && strings.HasPrefix(sel.Sel.Name, "Bool")
					flags[name] = goBool
				}
				break
			}
		}
		return true
	})
}

// registerFlags adds the flags defined by Register(fs *flag.FlagSet)
// (or RegisterFlags) methods of the package in dir.
func registerFlags(t *testing.T, dir string, flags map[string]bool) {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		return // not a package directory (api/...): nothing to add
	}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || !strings.HasPrefix(fn.Name.Name, "Register") || fn.Body == nil {
					continue
				}
				recv := map[string]bool{"flag": true, "tritonflag": true}
				for _, p := range fn.Type.Params.List {
					if star, ok := p.Type.(*ast.StarExpr); ok && isSel(star.X, "flag", "FlagSet") {
						for _, n := range p.Names {
							recv[n.Name] = true
						}
					}
				}
				collectFlags(fn.Body, recv, flags)
			}
		}
	}
}

func isSel(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

// checkArgs parses args as the main would, with a FlagSet that has the same
// names and the same value-taking behaviour, and reports unknown flags and
// stray arguments (Go's flag package stops at the first non-flag, silently
// ignoring everything after it).
func checkArgs(t *testing.T, what, service string, args []string) {
	t.Helper()
	defined := mainFlags(t, cmdDir(service))
	fs := flag.NewFlagSet(service, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for name, goBool := range defined {
		if goBool {
			fs.Bool(name, false, "")
		} else {
			fs.String(name, "", "")
		}
	}
	if err := fs.Parse(args); err != nil {
		t.Errorf("%s: %s's main rejects %q: %v", what, service, args, err)
		return
	}
	if fs.NArg() > 0 {
		t.Errorf("%s: %s's main would stop parsing at %q (args %q)", what, service, fs.Arg(0), args)
	}
}

func TestMainFlagsParsed(t *testing.T) {
	// The parser must see what the mains define, or every check above is void.
	for _, tt := range []struct {
		service string
		want    []string
	}{
		{"gateway", []string{"nats-url", "http-port", "grpc-port", "metrics-port", "allow-http",
			"nats-user", "nats-password", "nats-token", "nats-creds", "nats-ca", "grpc-use-ssl", "grpc-server-cert", "http-use-ssl-mutual", "http-restricted-api"}},
		{"executor", []string{"nats-url", "model-repository", "load-model", "node", "nats-nkey", "redis-url", "redis-user", "redis-ca"}},
		{"shm-registry", []string{"nats-url", "redis-url", "probe-addr", "redis-user", "redis-ca"}},
		{"sequence-router", []string{"nats-url", "redis-url", "probe-addr", "redis-user", "redis-password", "redis-ca"}},
		{"standalone", []string{"model-repository", "http-port", "allow-http", "redis-url", "admin-port"}},
		{"nereidctl", []string{"addr", "tls", "ca", "cert", "key", "restricted", "timeout"}},
	} {
		t.Run(tt.service, func(t *testing.T) {
			got := mainFlags(t, cmdDir(tt.service))
			for _, name := range tt.want {
				if _, ok := got[name]; !ok {
					t.Errorf("flag --%s not found in %s (found %v)", name, cmdDir(tt.service), got)
				}
			}
			if got["allow-http"] {
				t.Errorf("--allow-http read as a Go bool; tritonflag.Bool takes a value")
			}
		})
	}
}
