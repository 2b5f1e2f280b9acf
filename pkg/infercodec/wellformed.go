package infercodec

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// The generated decoders do not check that strings are UTF-8, and keep as
// unknown fields some malformed data protobuf's decoder refuses (a group
// that does not end as it began). A message that fails these checks is
// decoded again by protobuf, so that both accept the same messages with
// the same results: our encoders never produce unknown fields or invalid
// strings, so the fast path is the only one in practice. Nor do they say
// what they skipped (an unknown field inside a map entry, a scalar given
// twice): a message whose re-encoded size is not the size received goes
// to protobuf too.

var errUTF8 = errors.New("string field contains invalid UTF-8")

func checkRequestUTF8(r *inference.ModelInferRequest) error {
	ok := utf8.ValidString(r.ModelName) && utf8.ValidString(r.ModelVersion) && utf8.ValidString(r.Id) && paramsUTF8(r.Parameters) && known(r)
	for _, in := range r.Inputs {
		ok = ok && utf8.ValidString(in.Name) && utf8.ValidString(in.Datatype) && paramsUTF8(in.Parameters) && known(in) && knownContents(in.Contents)
	}
	for _, out := range r.Outputs {
		ok = ok && utf8.ValidString(out.Name) && paramsUTF8(out.Parameters) && known(out)
	}
	if !ok {
		return errUTF8
	}
	return nil
}

func checkResponseUTF8(r *inference.ModelInferResponse) error {
	ok := utf8.ValidString(r.ModelName) && utf8.ValidString(r.ModelVersion) && utf8.ValidString(r.Id) && paramsUTF8(r.Parameters) && known(r)
	for _, out := range r.Outputs {
		ok = ok && utf8.ValidString(out.Name) && utf8.ValidString(out.Datatype) && paramsUTF8(out.Parameters) && known(out) && knownContents(out.Contents)
	}
	if !ok {
		return errUTF8
	}
	return nil
}

// known reports whether m holds no unknown fields.
func known(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

// knownContents is known for a tensor's optional contents.
func knownContents(c *inference.InferTensorContents) bool { return c == nil || known(c) }

func paramsUTF8(ps map[string]*inference.InferParameter) bool {
	for k, p := range ps {
		if !utf8.ValidString(k) || !utf8.ValidString(p.GetStringParam()) || (p != nil && !known(p)) {
			return false
		}
	}
	return true
}
