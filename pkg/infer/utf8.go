package infer

import (
	"unicode/utf8"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// CheckUTF8 reports the first string of req that is not valid UTF-8. Every
// string field of a protobuf message must be, so such a request could not
// travel to an executor at all; the client hears which string is wrong
// (INVALID_ARG) instead of an encoding failure inside the server.
func CheckUTF8(req *inference.ModelInferRequest) error {
	// What names a bad string is put together only once one is found: a
	// valid request (nearly all of them) costs no allocation here.
	for _, c := range [...]struct{ what, s string }{{"model name", req.GetModelName()}, {"model version", req.GetModelVersion()}, {"request id", req.GetId()}} {
		if !utf8.ValidString(c.s) {
			return notUTF8(c.what, c.s)
		}
	}
	if err := checkParams(req.GetParameters(), "", ""); err != nil {
		return err
	}
	for _, in := range req.GetInputs() {
		switch {
		case !utf8.ValidString(in.GetName()):
			return notUTF8("input name", in.GetName())
		case !utf8.ValidString(in.GetDatatype()):
			return notUTF8("datatype of input '"+in.GetName()+"'", in.GetDatatype())
		}
		if err := checkParams(in.GetParameters(), "input", in.GetName()); err != nil {
			return err
		}
	}
	for _, out := range req.GetOutputs() {
		if !utf8.ValidString(out.GetName()) {
			return notUTF8("output name", out.GetName())
		}
		if err := checkParams(out.GetParameters(), "output", out.GetName()); err != nil {
			return err
		}
	}
	return nil
}

// checkParams checks the names and string values of parameters ps, those
// of the request itself when kind is empty, else of its kind ("input",
// "output") named name.
func checkParams(ps map[string]*inference.InferParameter, kind, name string) error {
	for k, p := range ps {
		if !utf8.ValidString(k) {
			return notUTF8("parameter name"+paramsOf(kind, name), k)
		}
		if s, ok := p.GetParameterChoice().(*inference.InferParameter_StringParam); ok && !utf8.ValidString(s.StringParam) {
			return notUTF8("value of parameter '"+k+"'"+paramsOf(kind, name), s.StringParam)
		}
	}
	return nil
}

func paramsOf(kind, name string) string {
	if kind == "" {
		return ""
	}
	return " of " + kind + " '" + name + "'"
}

func notUTF8(what, s string) error {
	return tritonerr.InvalidArgf("%s %q is not valid UTF-8", what, s)
}
