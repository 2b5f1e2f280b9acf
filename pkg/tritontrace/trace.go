package tritontrace

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nereid-io/nereid/pkg/tracesetting"
)

// Stamp is one of Triton's timestamp names. Their order is the order a
// trace's records are written in: the front end's receipt, the request
// (its queue and compute instants), the front end's send.
type Stamp uint8

// Triton's timestamps (TRITONSERVER_InferenceTraceActivity and the front
// ends' own).
const (
	HTTPRecvStart Stamp = iota
	HTTPRecvEnd
	GRPCWaitReadStart
	GRPCWaitReadEnd
	RequestStart
	QueueStart
	ComputeStart
	ComputeInputEnd
	ComputeOutputStart
	ComputeEnd
	RequestEnd
	HTTPSendStart
	HTTPSendEnd
	GRPCSendStart
	GRPCSendEnd
	numStamps
)

var stampNames = [numStamps]string{
	"HTTP_RECV_START", "HTTP_RECV_END", "GRPC_WAITREAD_START", "GRPC_WAITREAD_END",
	"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
	"COMPUTE_END", "REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END", "GRPC_SEND_START", "GRPC_SEND_END",
}

// String is the name Triton writes.
func (s Stamp) String() string {
	if s < numStamps {
		return stampNames[s]
	}
	return "Stamp(" + strconv.Itoa(int(s)) + ")"
}

// Activity is what a tensor record of level TENSORS shows.
type Activity uint8

// Triton's tensor activities.
const (
	TensorQueueInput    Activity = iota // an input as the request enters the queue
	TensorBackendOutput                 // an output as the backend produced it
)

func (a Activity) String() string {
	if a == TensorQueueInput {
		return "TENSOR_QUEUE_INPUT"
	}
	return "TENSOR_BACKEND_OUTPUT"
}

// Trace is one traced request. Its methods are safe on a nil *Trace (an
// untraced request), and are called by one goroutine at a time.
type Trace struct {
	ID        uint64
	Model     string
	Version   int64
	RequestID string
	// ParentID is the trace of the ensemble request whose step this is
	// (Writer.StartChild); 0 for a request of a client.
	ParentID uint64

	level   tracesetting.Level
	sampler *tracesetting.Sampler
	at      [numStamps]int64
	// more are the instants a stamp has more than once, written after
	// the others in the order recorded: a decoupled model's responses
	// each have their own send (Append).
	more []stampAt
	// inputs and outputs are rendered tensor records, without their id.
	inputs, outputs [][]byte
	// family gathers the records of a request's child traces (its
	// ensemble steps, theirs in turn), written with the request's own
	// as Triton writes a trace and the children it spawned; shared by
	// the whole tree, nil until a child is started.
	family *family
}

type stampAt struct {
	s  Stamp
	ns int64
}

// family is what the child traces of one client request gathered: their
// records by trace id, rendered as each ended (steps end on their own
// goroutines).
type family struct {
	mu       sync.Mutex
	children []child
	done     bool // the root trace was written: later children are dropped
}

type child struct {
	id   uint64
	recs []byte
}

// Stamp records s at t.
func (t *Trace) Stamp(s Stamp, at time.Time) {
	if t == nil || s >= numStamps {
		return
	}
	t.at[s] = at.UnixNano()
}

// Spawns prepares t to have child traces (Writer.StartChild), which may
// then start on any goroutine. Called before the first child starts.
func (t *Trace) Spawns() {
	if t != nil && t.family == nil {
		t.family = &family{}
	}
}

// Append records one more instant of s (a send per response of a
// decoupled model), written after the trace's other timestamps.
func (t *Trace) Append(s Stamp, at time.Time) {
	if t == nil || s >= numStamps {
		return
	}
	t.more = append(t.more, stampAt{s, at.UnixNano()})
}

// Stamped reports whether s was recorded.
func (t *Trace) Stamped(s Stamp) bool { return t != nil && s < numStamps && t.at[s] != 0 }

// Tensors reports whether the trace records tensors (level TENSORS).
func (t *Trace) Tensors() bool { return t != nil && t.level&tracesetting.LevelTensors != 0 }

// AddTensor records a tensor (at level TENSORS; nothing otherwise) from
// its raw little-endian contents, formatted at once as Triton formats it.
func (t *Trace) AddTensor(a Activity, name, datatype string, shape []int64, raw []byte) {
	if !t.Tensors() {
		return
	}
	rec := tensorRecord(nil, a, name, datatype, shape, raw)
	if a == TensorQueueInput {
		t.inputs = append(t.inputs, rec)
	} else {
		t.outputs = append(t.outputs, rec)
	}
}

// appendJSON appends t's records, comma-separated, as Triton's tracer
// writes one trace's stream.
func (t *Trace) appendJSON(b []byte) []byte {
	n := 0
	sep := func() {
		if n > 0 {
			b = append(b, ',')
		}
		n++
	}
	stampNS := func(s Stamp, ns int64) {
		if t.level&tracesetting.LevelTimestamps == 0 || ns == 0 {
			return
		}
		sep()
		b = t.appendID(b)
		b = append(b, `,"timestamps":[{"name":"`...)
		b = append(b, stampNames[s]...)
		b = append(b, `","ns":`...)
		b = strconv.AppendInt(b, ns, 10)
		b = append(b, "}]}"...)
	}
	stamp := func(s Stamp) { stampNS(s, t.at[s]) }
	tensors := func(recs [][]byte) {
		for _, r := range recs {
			sep()
			b = t.appendID(b)
			b = append(b, ',')
			b = append(b, r...)
			b = append(b, '}')
		}
	}
	for s := HTTPRecvStart; s < RequestStart; s++ {
		stamp(s)
	}
	sep()
	b = t.appendID(b)
	b = append(b, `,"model_name":`...)
	b = appendString(b, t.Model)
	b = append(b, `,"model_version":`...)
	b = strconv.AppendInt(b, t.Version, 10)
	if t.RequestID != "" {
		b = append(b, `,"request_id":`...)
		b = appendString(b, t.RequestID)
	}
	if t.ParentID != 0 {
		b = append(b, `,"parent_id":`...)
		b = strconv.AppendUint(b, t.ParentID, 10)
	}
	b = append(b, '}')
	stamp(RequestStart)
	stamp(QueueStart)
	tensors(t.inputs)
	stamp(ComputeStart)
	stamp(ComputeInputEnd)
	stamp(ComputeOutputStart)
	tensors(t.outputs)
	for s := ComputeEnd; s < numStamps; s++ {
		stamp(s)
	}
	for _, m := range t.more {
		stampNS(m.s, m.ns)
	}
	return b
}

// adopt keeps the records of c, a child trace that ended, for its root;
// they are dropped once the root was written, or when the parent did not
// expect children (Spawns).
func (f *family) adopt(c *Trace) {
	if f == nil {
		return
	}
	recs := c.appendJSON(nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done {
		f.children = append(f.children, child{c.ID, recs})
	}
}

// appendChildren appends the records of the children gathered, in the
// order of their ids (the order their requests started), each after a
// comma, and closes the family.
func (f *family) appendChildren(b []byte) []byte {
	if f == nil {
		return b
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	slices.SortFunc(f.children, func(a, b child) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	for _, c := range f.children {
		b = append(b, ',')
		b = append(b, c.recs...)
	}
	return b
}

func (t *Trace) appendID(b []byte) []byte {
	b = append(b, `{"id":`...)
	return strconv.AppendUint(b, t.ID, 10)
}

func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// tensorRecord renders `"activity":...,"tensor":{...}` as Triton's
// TraceTensorActivity does: the elements comma-separated (BOOL as 0 or 1,
// floats with six significant digits as C++ streams print them, BYTES
// elements each in double quotes, FP16 and BF16 left empty), the shape
// comma-separated.
func tensorRecord(b []byte, a Activity, name, datatype string, shape []int64, raw []byte) []byte {
	b = append(b, `"activity":"`...)
	b = append(b, a.String()...)
	b = append(b, `","tensor":{"name":`...)
	b = appendString(b, name)
	b = append(b, `,"data":`...)
	b = appendString(b, tensorData(datatype, shape, raw))
	b = append(b, `,"shape":"`...)
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	b = append(b, `","dtype":`...)
	b = appendString(b, datatype)
	return append(b, '}')
}

func elementCount(shape []int64) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0
		}
		n *= int(d)
	}
	return n
}

var elementSize = map[string]int{
	"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "UINT32": 4, "INT32": 4,
	"UINT64": 8, "INT64": 8, "FP32": 4, "FP64": 8,
}

func tensorData(datatype string, shape []int64, raw []byte) string {
	n := elementCount(shape)
	var b []byte
	if datatype == "BYTES" {
		for e := 0; e < n; e++ {
			if len(raw) < 4 {
				break
			}
			l := int(binary.LittleEndian.Uint32(raw))
			if len(raw)-4 < l {
				break
			}
			if e > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, raw[4:4+l]...)
			b = append(b, '"')
			raw = raw[4+l:]
		}
		return string(b)
	}
	size, ok := elementSize[datatype]
	if !ok { // FP16, BF16: Triton leaves them empty
		return ""
	}
	n = min(n, len(raw)/size)
	le := binary.LittleEndian
	for e := 0; e < n; e++ {
		if e > 0 {
			b = append(b, ',')
		}
		x := raw[e*size:]
		switch datatype {
		case "BOOL":
			if x[0] != 0 {
				b = append(b, '1')
			} else {
				b = append(b, '0')
			}
		case "UINT8":
			b = strconv.AppendUint(b, uint64(x[0]), 10)
		case "INT8":
			b = strconv.AppendInt(b, int64(int8(x[0])), 10)
		case "UINT16":
			b = strconv.AppendUint(b, uint64(le.Uint16(x)), 10)
		case "INT16":
			b = strconv.AppendInt(b, int64(int16(le.Uint16(x))), 10)
		case "UINT32":
			b = strconv.AppendUint(b, uint64(le.Uint32(x)), 10)
		case "INT32":
			b = strconv.AppendInt(b, int64(int32(le.Uint32(x))), 10)
		case "UINT64":
			b = strconv.AppendUint(b, le.Uint64(x), 10)
		case "INT64":
			b = strconv.AppendInt(b, int64(le.Uint64(x)), 10)
		case "FP32":
			b = appendFloat(b, float64(math.Float32frombits(le.Uint32(x))), 32)
		case "FP64":
			b = appendFloat(b, math.Float64frombits(le.Uint64(x)), 64)
		}
	}
	return string(b)
}

// appendFloat prints f as a C++ stream does by default (%g, precision 6).
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "nan"...)
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', 6, bits)
}
