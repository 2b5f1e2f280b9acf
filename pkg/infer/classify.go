package infer

import (
	"bufio"
	"encoding/binary"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ParamClassification is the requested-output parameter of the
// classification extension: the number of top classes to return instead of
// the output's values.
const ParamClassification = "classification"

// Labels are the class labels of one model's outputs, read from the files
// the configuration names (output label_filename, relative to the model
// directory), one label per line, line i naming class i.
type Labels map[string][]string

// ReadLabels reads the label files of cfg's outputs from the model
// directory dir. A configured file that cannot be read fails the load, as
// in Triton.
func ReadLabels(dir string, cfg *inference.ModelConfig) (Labels, error) {
	var labels Labels
	for _, o := range cfg.GetOutput() {
		name := o.GetLabelFilename()
		if name == "" {
			continue
		}
		path := name
		if !isAbs(path) {
			path = dir + string(os.PathSeparator) + name
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, tritonerr.Internalf("unable to open label file '%s' for output '%s' of model '%s': %v",
				name, o.GetName(), cfg.GetName(), err)
		}
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, tritonerr.Internalf("reading label file '%s' for output '%s' of model '%s': %v",
				name, o.GetName(), cfg.GetName(), err)
		}
		if labels == nil {
			labels = make(Labels)
		}
		labels[o.GetName()] = lines
	}
	return labels, nil
}

func isAbs(p string) bool { return len(p) > 0 && p[0] == os.PathSeparator }

// label returns the label of class idx of output, "" when there is none.
func (l Labels) label(output string, idx int) string {
	lines := l[output]
	if idx < len(lines) {
		return lines[idx]
	}
	return ""
}

// ClassificationCount reads an output's classification parameter as
// Triton's gRPC front end does (ParseClassificationParams): absent means
// none (ok false); present, it must be an int64_param of at least 1. The
// HTTP front end sends a positive count the same way.
func ClassificationCount(o *inference.ModelInferRequest_InferRequestedOutputTensor) (n uint64, ok bool, err error) {
	p, ok := o.GetParameters()[ParamClassification]
	if !ok {
		return 0, false, nil
	}
	c, isInt := p.GetParameterChoice().(*inference.InferParameter_Int64Param)
	if !isInt {
		return 0, false, tritonerr.InvalidArgf("invalid value type for 'classification' parameter, expected int64_param")
	}
	if c.Int64Param <= 0 {
		return 0, false, tritonerr.InvalidArgf("invalid value for 'classification' parameter, expected >= 1")
	}
	return uint64(c.Int64Param), true, nil
}

// ClassificationCounts maps each output requested with classification to
// its count.
func ClassificationCounts(outputs []*inference.ModelInferRequest_InferRequestedOutputTensor) (map[string]uint64, error) {
	var counts map[string]uint64
	for _, o := range outputs {
		n, ok, err := ClassificationCount(o)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if counts == nil {
			counts = make(map[string]uint64)
		}
		counts[o.GetName()] = n
	}
	return counts, nil
}

// MaxClassificationElements bounds the values of one batch entry that
// Classify sorts, as Triton's front ends do: a larger output is refused
// rather than sorted.
const MaxClassificationElements = 1_000_000

// Classify replaces an output's values with its top k classes, as Triton's
// front ends do for the classification extension: per batch entry (the
// first dimension when batching), the min(k, classes) largest values in
// decreasing order (ties by class index), each as the BYTES string
// "<value>:<index>" or "<value>:<index>:<label>" when the output has a
// label for that class. Values print as C++'s std::to_string does (six
// decimals for floating point). The result has shape [batch, n] or [n] and
// datatype BYTES.
func Classify(output string, dt tensor.DataType, shape []int64, data []byte, k uint64, batching bool, labels Labels) ([]int64, []byte, error) {
	read, ok := classValue(dt)
	if !ok {
		return nil, nil, tritonerr.InvalidArgf("class result not available for output due to unsupported type '%s'", dt)
	}
	batch := int64(0)
	if batching && len(shape) > 0 {
		batch = shape[0]
	}
	per := int64(1)
	dims := shape
	if batch > 0 {
		dims = shape[1:]
	}
	for _, d := range dims {
		if d < 0 || (d > 0 && per > math.MaxInt64/d) {
			return nil, nil, tritonerr.Internalf("output '%s' has invalid shape %s", output, tensor.DimsString(shape))
		}
		per *= d
	}
	if per > MaxClassificationElements {
		return nil, nil, tritonerr.InvalidArgf("classification output tensor too large")
	}
	size := int64(dt.Size())
	rows := max(1, batch)
	n := int64(min(k, uint64(per)))
	out := make([]byte, 0, rows*n*24)
	idx := make([]int, per)
	for row := int64(0); row < rows; row++ {
		off := row * per * size
		var vals []byte
		count := per
		if off+per*size > int64(len(data)) {
			count = 0 // a short tensor yields no classes, as in Triton
		} else {
			vals = data[off : off+per*size]
		}
		idx = idx[:count]
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			va, vb := read(vals, a), read(vals, b)
			switch {
			case va.greater(vb):
				return -1
			case vb.greater(va):
				return 1
			}
			return 0
		})
		for _, c := range idx[:min(int64(len(idx)), n)] {
			s := read(vals, c).String() + ":" + strconv.Itoa(c)
			if l := labels.label(output, c); l != "" {
				s += ":" + l
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(len(s)))
			out = append(out, s...)
		}
	}
	if batch > 0 {
		return []int64{batch, n}, out, nil
	}
	return []int64{n}, out, nil
}

// classNumber is one element of a classified output.
type classNumber struct {
	f     float64
	i     int64
	u     uint64
	kind  byte // 'f', 'i', 'u'
	float bool // FP32: printed with float precision
}

func (a classNumber) greater(b classNumber) bool {
	switch a.kind {
	case 'f':
		return a.f > b.f
	case 'i':
		return a.i > b.i
	}
	return a.u > b.u
}

// String prints like std::to_string: integers in decimal, floating point
// with "%f".
func (a classNumber) String() string {
	switch a.kind {
	case 'f':
		bits := 64
		if a.float {
			bits = 32
		}
		return strconv.FormatFloat(a.f, 'f', 6, bits)
	case 'i':
		return strconv.FormatInt(a.i, 10)
	}
	return strconv.FormatUint(a.u, 10)
}

// classValue returns the reader of element i for the datatypes Triton
// classifies (integers and FP32/FP64).
func classValue(dt tensor.DataType) (func(b []byte, i int) classNumber, bool) {
	le := binary.LittleEndian
	switch dt {
	case tensor.Uint8:
		return func(b []byte, i int) classNumber { return classNumber{u: uint64(b[i]), kind: 'u'} }, true
	case tensor.Uint16:
		return func(b []byte, i int) classNumber { return classNumber{u: uint64(le.Uint16(b[2*i:])), kind: 'u'} }, true
	case tensor.Uint32:
		return func(b []byte, i int) classNumber { return classNumber{u: uint64(le.Uint32(b[4*i:])), kind: 'u'} }, true
	case tensor.Uint64:
		return func(b []byte, i int) classNumber { return classNumber{u: le.Uint64(b[8*i:]), kind: 'u'} }, true
	case tensor.Int8:
		return func(b []byte, i int) classNumber { return classNumber{i: int64(int8(b[i])), kind: 'i'} }, true
	case tensor.Int16:
		return func(b []byte, i int) classNumber { return classNumber{i: int64(int16(le.Uint16(b[2*i:]))), kind: 'i'} }, true
	case tensor.Int32:
		return func(b []byte, i int) classNumber { return classNumber{i: int64(int32(le.Uint32(b[4*i:]))), kind: 'i'} }, true
	case tensor.Int64:
		return func(b []byte, i int) classNumber { return classNumber{i: int64(le.Uint64(b[8*i:])), kind: 'i'} }, true
	case tensor.FP32:
		return func(b []byte, i int) classNumber {
			return classNumber{f: float64(math.Float32frombits(le.Uint32(b[4*i:]))), kind: 'f', float: true}
		}, true
	case tensor.FP64:
		return func(b []byte, i int) classNumber {
			return classNumber{f: math.Float64frombits(le.Uint64(b[8*i:])), kind: 'f'}
		}, true
	}
	return nil, false
}
