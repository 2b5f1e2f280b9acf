package seqrouter

import "google.golang.org/protobuf/encoding/protowire"

// requestID reads the id (field 3) of an encoded inference.ModelInferRequest
// without decoding the rest: the router forwards the request's bytes as
// they are and needs the id only for its log lines. A malformed body has
// no id; the executor reports what is wrong with it.
func requestID(body []byte) string {
	const idField = 3
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return ""
		}
		body = body[n:]
		if num == idField && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(body)
			if m < 0 {
				return ""
			}
			return string(v)
		}
		m := protowire.ConsumeFieldValue(num, typ, body)
		if m < 0 {
			return ""
		}
		body = body[m:]
	}
	return ""
}
