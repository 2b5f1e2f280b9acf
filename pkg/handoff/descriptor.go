package handoff

import (
	"fmt"
	"strconv"
	"strings"
)

// Param is the request and response parameter that carries a hand-off
// descriptor between a gateway and an executor. Clients may not send it.
const Param = "nereid_handoff"

// Mode says how the tensors of a descriptor travel.
type Mode byte

const (
	// ModeFile: through a file in Dir on the node both sides run on.
	ModeFile Mode = 'f'
	// ModeKept: through a file in Dir that the sender keeps for other
	// requests to read (an ensemble step's output that later steps take as
	// their input): the receiver maps it privately, so that a backend
	// writing into its inputs changes no other reader's bytes, and leaves
	// it in place.
	ModeKept Mode = 'k'
	// ModeProcess: gateway and executor share one process; the tensors are
	// handed over as slices, with no copy at all.
	ModeProcess Mode = 'p'
)

// Source says which file a span lies in.
type Source byte

const (
	// SourceFile is the descriptor's own file.
	SourceFile Source = 'f'
	// SourceRequest is, in a response, the request's file: an output that is
	// (part of) an input, as an identity model returns, is not copied.
	SourceRequest Source = 'q'
)

// Span places tensor Index (an input of a request, an output of a
// response) at Offset..Offset+Len of a file.
type Span struct {
	Index       int
	Source      Source
	Offset, Len int64
}

// Descriptor is what travels in Param:
//
//	f;<file>;<size>[;<index>:<source>:<offset>:<len>]...   (ModeFile; <file> may be empty
//	                                                          when every span is SourceRequest)
//	k;<file>;<size>[;<index>:f:<offset>:<len>]...          (ModeKept, in a request)
//	p;<key>                                                 (ModeProcess)
//
// A request always carries one when the gateway can take a handed-off
// response, even when no input is large.
type Descriptor struct {
	Mode  Mode
	Name  string // ModeFile: the file in Dir; ModeProcess: the exchange key
	Size  int64  // ModeFile: the file's size
	Spans []Span
}

// String encodes d.
func (d Descriptor) String() string {
	var b strings.Builder
	b.WriteByte(byte(d.Mode))
	b.WriteByte(';')
	b.WriteString(d.Name)
	if d.Mode == ModeProcess {
		return b.String()
	}
	b.WriteByte(';')
	b.WriteString(strconv.FormatInt(d.Size, 10))
	for _, s := range d.Spans {
		fmt.Fprintf(&b, ";%d:%c:%d:%d", s.Index, s.Source, s.Offset, s.Len)
	}
	return b.String()
}

// ParseDescriptor decodes and checks a descriptor: spans lie inside their
// file (requestSize is the size of the request's file, for SourceRequest
// spans; -1 when there is none), indices are below n and appear once.
func ParseDescriptor(s string, n int, requestSize int64) (Descriptor, error) {
	bad := func(why string) (Descriptor, error) {
		return Descriptor{}, fmt.Errorf("handoff: malformed descriptor %q: %s", s, why)
	}
	if key, ok := strings.CutPrefix(s, string(ModeProcess)+";"); ok {
		// The descriptor of every request to an executor of this process:
		// read without splitting.
		if key == "" || strings.IndexByte(key, ';') >= 0 {
			return bad("a process hand-off names its key only")
		}
		return Descriptor{Mode: ModeProcess, Name: key}, nil
	}
	parts := strings.Split(s, ";")
	if len(parts) < 2 || len(parts[0]) != 1 {
		return bad("no mode")
	}
	d := Descriptor{Mode: Mode(parts[0][0]), Name: parts[1]}
	switch d.Mode {
	case ModeProcess:
		if len(parts) != 2 || d.Name == "" {
			return bad("a process hand-off names its key only")
		}
		return d, nil
	case ModeFile:
	case ModeKept:
		if d.Name == "" {
			return bad("a kept file must be named")
		}
	default:
		return bad("unknown mode")
	}
	if len(parts) < 3 {
		return bad("no size")
	}
	if d.Name != "" && !ValidName(d.Name) {
		return bad("invalid file name")
	}
	size, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || size < 0 || (d.Name == "" && size != 0) {
		return bad("invalid size")
	}
	d.Size = size
	seen := make(map[int]bool, len(parts)-3)
	for _, p := range parts[3:] {
		f := strings.Split(p, ":")
		if len(f) != 4 || len(f[1]) != 1 {
			return bad("invalid span")
		}
		idx, err1 := strconv.Atoi(f[0])
		off, err2 := strconv.ParseInt(f[2], 10, 64)
		ln, err3 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || idx < 0 || idx >= n || off < 0 || ln < 0 {
			return bad("invalid span")
		}
		if seen[idx] {
			return bad("tensor named twice")
		}
		seen[idx] = true
		limit := size
		switch src := Source(f[1][0]); src {
		case SourceFile:
			if d.Name == "" {
				return bad("span in a file that is not named")
			}
		case SourceRequest:
			limit = requestSize
		default:
			return bad("unknown span source")
		}
		if off > limit || ln > limit-off {
			return bad("span outside its file")
		}
		d.Spans = append(d.Spans, Span{Index: idx, Source: Source(f[1][0]), Offset: off, Len: ln})
	}
	return d, nil
}
