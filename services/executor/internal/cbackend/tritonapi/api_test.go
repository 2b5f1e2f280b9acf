package tritonapi

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the function table of docs/triton-backends.md from testdata/functions.txt")

// function is one line of testdata/functions.txt.
type function struct {
	header, name, ret string
	params            []string
	status            string
}

// entry reports whether the function is one a backend exports (the
// server calls it) rather than one the server exports.
func (f function) entry() bool { return strings.HasPrefix(f.status, "entry:") }

func (f function) prototype() string {
	return fmt.Sprintf("%s %s(%s);", f.ret, f.name, strings.Join(f.params, ", "))
}

func load(t *testing.T) []function {
	t.Helper()
	file, err := os.Open("testdata/functions.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var out []function
	seen := map[string]bool{}
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, " | ")
		if len(cols) != 5 {
			t.Fatalf("functions.txt: %q has %d columns, want 5", line, len(cols))
		}
		f := function{header: cols[0], name: cols[1], ret: cols[2], status: cols[4]}
		for _, p := range strings.Split(cols[3], ", ") {
			f.params = append(f.params, strings.TrimSpace(p))
		}
		switch {
		case f.status == "implemented", strings.HasPrefix(f.status, "unsupported: "),
			f.status == "entry: called", strings.HasPrefix(f.status, "entry: not called: "):
		default:
			t.Fatalf("functions.txt: %s: unknown status %q", f.name, f.status)
		}
		if seen[f.header+f.name] {
			t.Fatalf("functions.txt: %s listed twice", f.name)
		}
		seen[f.header+f.name] = true
		out = append(out, f)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHeadersDeclareTritonSignatures compiles a C file that declares every
// function again with Triton's prototype after the bridge's headers and
// takes its address: a function the headers lack, or declare with other
// parameters (a different count or types), fails to compile.
func TestHeadersDeclareTritonSignatures(t *testing.T) {
	fns := load(t)
	var b strings.Builder
	b.WriteString("#include \"triton/core/tritonbackend.h\"\n\n")
	for _, f := range fns {
		b.WriteString(f.prototype() + "\n")
	}
	b.WriteString("\ntypedef void (*any_fn)(void);\nany_fn const nereid_all[] = {\n")
	for _, f := range fns {
		fmt.Fprintf(&b, "  (any_fn)%s,\n", f.name)
	}
	b.WriteString("};\n")
	dir := t.TempDir()
	src := filepath.Join(dir, "signatures.c")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("cc", "-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I", filepath.Join("..", "include"), src).CombinedOutput()
	if err != nil {
		t.Fatalf("the bridge's headers disagree with Triton's prototypes: %v\n%s", err, out)
	}
}

// TestServerLibraryExportsEveryFunction builds libtritonserver.so as `make
// build` does and checks its dynamic symbols: every function a backend
// may call is there, so a backend built against Triton's headers links
// and loads (RTLD_NOW) against it.
func TestServerLibraryExportsEveryFunction(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libtritonserver.so")
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-Wl,-soname,libtritonserver.so", "-o", lib,
		filepath.Join("..", "stub", "tritonserver_stub.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	out, err := exec.Command("nm", "-D", "--defined-only", lib).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "T" {
			exported[f[2]] = true
		}
	}
	for _, f := range load(t) {
		if !f.entry() && !exported[f.name] {
			t.Errorf("libtritonserver.so does not export %s", f.name)
		}
	}
}

// cDefinition matches a function defined (not only declared) in C.
var cDefinition = regexp.MustCompile(`(?m)^[A-Za-z_][\w \*]*?\b(TRITON(?:SERVER|BACKEND)_\w+)\(([^;{]*?)\)\s*\{`)

// TestBridgeDefinesEveryFunction checks that the executor defines every
// function a backend may call: in the bridge's C files (compiled against
// the headers, so their signatures are checked there) or as a cgo export
// with Triton's number of parameters.
func TestBridgeDefinesEveryFunction(t *testing.T) {
	defined := map[string]int{} // name -> parameter count, -1 for C (checked by the compiler)
	cfiles, _ := filepath.Glob(filepath.Join("..", "*.c"))
	for _, p := range cfiles {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cDefinition.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = -1
		}
	}
	gofiles, _ := filepath.Glob(filepath.Join("..", "*.go"))
	fset := token.NewFileSet()
	for _, p := range gofiles {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Doc == nil {
				continue
			}
			for _, c := range fd.Doc.List {
				if name, ok := strings.CutPrefix(c.Text, "//export "); ok && strings.TrimSpace(name) == fd.Name.Name {
					defined[fd.Name.Name] = countParams(fd.Type.Params)
				}
			}
		}
	}
	for _, f := range load(t) {
		if f.entry() {
			continue
		}
		n, ok := defined[f.name]
		switch {
		case !ok:
			t.Errorf("the executor does not define %s", f.name)
		case n >= 0 && n != len(f.params) && !(len(f.params) == 1 && f.params[0] == "void"):
			t.Errorf("%s is exported with %d parameters; Triton's has %d: %s", f.name, n, len(f.params), f.prototype())
		}
	}
}

func countParams(fl *ast.FieldList) int {
	n := 0
	for _, f := range fl.List {
		n += max(len(f.Names), 1)
	}
	return n
}

const (
	tableBegin = "<!-- functions: generated from services/executor/internal/cbackend/tritonapi/testdata/functions.txt -->"
	tableEnd   = "<!-- end of functions -->"
)

// table is the docs' list of every function with its status.
func table(fns []function) string {
	var b strings.Builder
	b.WriteString(tableBegin + "\n\n")
	for _, h := range []string{"tritonbackend.h", "tritonserver.h"} {
		fmt.Fprintf(&b, "#### `%s`\n\n| function | status |\n| --- | --- |\n", h)
		sorted := slices.Clone(fns)
		slices.SortStableFunc(sorted, func(a, b function) int { return strings.Compare(a.name, b.name) })
		for _, f := range sorted {
			if f.header != h {
				continue
			}
			status := f.status
			switch {
			case f.status == "entry: called":
				status = "entry point (the backend's): called"
			case strings.HasPrefix(f.status, "entry: not called: "):
				status = "entry point (the backend's): not called — " + strings.TrimPrefix(f.status, "entry: not called: ")
			case strings.HasPrefix(f.status, "unsupported: "):
				status = "unsupported (`TRITONSERVER_ERROR_UNSUPPORTED`) — " + strings.TrimPrefix(f.status, "unsupported: ")
			}
			fmt.Fprintf(&b, "| `%s` | %s |\n", f.name, status)
		}
		b.WriteString("\n")
	}
	b.WriteString(tableEnd)
	return b.String()
}

// TestDocTable checks that docs/triton-backends.md lists every function
// with its status as functions.txt has it (-update rewrites the table).
func TestDocTable(t *testing.T) {
	path := filepath.Join("..", "..", "..", "..", "..", "docs", "triton-backends.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	want := table(load(t))
	if *update {
		if i < 0 || j < i {
			t.Fatalf("%s has no function table markers", path)
		}
		doc = doc[:i] + want + doc[j+len(tableEnd):]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if i < 0 || j < i {
		t.Fatalf("%s lacks the function table (run with -update)", path)
	}
	if got := doc[i : j+len(tableEnd)]; got != want {
		t.Errorf("%s's function table differs from testdata/functions.txt: run go test -run TestDocTable -update", path)
	}
}
