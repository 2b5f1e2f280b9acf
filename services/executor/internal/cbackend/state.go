//go:build cgo

package cbackend

import (
	"bytes"

	"github.com/nereid-io/nereid/pkg/backend"
)

// Implicit state (sequence_batching.state): the executor keeps each
// sequence's state tensors and gives them to the request as inputs named
// by state.input_name (internal/seqstate); TRITONBACKEND_StateNew, StateBuffer
// and StateUpdate are the Go backend API's Request.StateNew, State.Buffer
// and State.Update, with their errors.

// cState is a TRITONBACKEND_State while a backend fills it.
type cState struct {
	cr  *cRequest
	s   *backend.State
	buf []byte // from TRITONBACKEND_StateBuffer: pinned, the request's
}

// update is TRITONBACKEND_StateUpdate: the buffer's contents (copied, as
// the buffer is the request's memory) become the sequence's state for its
// next request.
func (st *cState) update() error {
	st.s.Data = bytes.Clone(st.buf)
	return st.s.Update()
}
