package seqbatch

import (
	"encoding/binary"
	"math"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Controls makes a model's sequence control tensors (SetControlTensors).
type Controls struct {
	start, end, ready, corrid *modelconfig.Control
	batching                  bool
	corridType                tensor.DataType
	// encoded false/true values of the boolean controls
	values map[*modelconfig.Control][2][]byte
}

// NewControls reads the control inputs of cfg's sequence batcher.
func NewControls(cfg *inference.ModelConfig) (*Controls, error) {
	sb := cfg.GetSequenceBatching()
	if sb == nil {
		return nil, tritonerr.InvalidArgf("model '%s' has no sequence batching", cfg.GetName())
	}
	c := &Controls{batching: cfg.GetMaxBatchSize() > 0, values: map[*modelconfig.Control][2][]byte{}}
	var err error
	for kind, dst := range map[inference.ModelSequenceBatching_Control_Kind]**modelconfig.Control{
		inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START: &c.start,
		inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:   &c.end,
		inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY: &c.ready,
	} {
		if *dst, err = modelconfig.BooleanControl(sb, cfg.GetName(), kind); err != nil {
			return nil, err
		}
		if ctl := *dst; ctl != nil {
			c.values[ctl] = boolValues(ctl)
		}
	}
	if c.corrid, err = modelconfig.CorrIDControl(sb, cfg.GetName()); err != nil {
		return nil, err
	}
	if c.corrid != nil {
		c.corridType = tensor.FromConfig(c.corrid.DataType)
	}
	return c, nil
}

func boolValues(ctl *modelconfig.Control) [2][]byte {
	var v [2][]byte
	cc := ctl.Config
	for i := range 2 {
		switch {
		case len(cc.Int32FalseTrue) == 2:
			v[i] = binary.LittleEndian.AppendUint32(nil, uint32(cc.Int32FalseTrue[i]))
		case len(cc.Fp32FalseTrue) == 2:
			v[i] = binary.LittleEndian.AppendUint32(nil, math.Float32bits(cc.Fp32FalseTrue[i]))
		default:
			b := byte(0)
			if cc.BoolFalseTrue[i] {
				b = 1
			}
			v[i] = []byte{b}
		}
	}
	return v
}

func (c *Controls) shape() []int64 {
	if c.batching {
		return []int64{1, 1}
	}
	return []int64{1}
}

// Inputs returns the control tensors for one request (an Entry): shape [1],
// or [1, 1] with the batch dimension. Padding gets READY false and CORRID 0
// (or "").
func (c *Controls) Inputs(e Entry) []backend.Input {
	var out []backend.Input
	add := func(ctl *modelconfig.Control, on bool) {
		if ctl == nil {
			return
		}
		i := 0
		if on {
			i = 1
		}
		out = append(out, backend.Input{Name: ctl.Input, DataType: tensor.FromConfig(ctl.DataType), Shape: c.shape(), Data: c.values[ctl][i]})
	}
	add(c.start, e.Start)
	add(c.end, e.End)
	add(c.ready, e.Ready)
	if c.corrid != nil {
		id := e.ID
		if e.Req == nil {
			id = ID{IsString: c.corridType == tensor.Bytes}
		}
		out = append(out, backend.Input{Name: c.corrid.Input, DataType: c.corridType, Shape: c.shape(), Data: c.corridBytes(id)})
	}
	return out
}

// corridBytes encodes an id as the CORRID datatype: 32-bit types keep the
// low 32 bits (Triton truncates), STRING is a u32 length and the bytes.
func (c *Controls) corridBytes(id ID) []byte {
	switch c.corridType {
	case tensor.Bytes:
		b := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(id.Str)), uint32(len(id.Str)))
		return append(b, id.Str...)
	case tensor.Uint32, tensor.Int32:
		return binary.LittleEndian.AppendUint32(nil, uint32(id.Uint))
	default:
		return binary.LittleEndian.AppendUint64(nil, id.Uint)
	}
}

// ValidateCorrelationID is Triton's check of a request's id type against
// the CORRID control (InferenceRequest::ValidateCorrelationId): a string id
// needs TYPE_STRING, a numeric id one of UINT64, INT64, UINT32, INT32.
func ValidateCorrelationID(cfg *inference.ModelConfig, id ID) error {
	sb := cfg.GetSequenceBatching()
	if sb == nil || id.IsZero() {
		return nil
	}
	ctl, err := modelconfig.CorrIDControl(sb, cfg.GetName())
	if err != nil || ctl == nil {
		return err
	}
	want := tensor.FromConfig(ctl.DataType)
	isStr := want == tensor.Bytes
	if id.IsString == isStr {
		return nil
	}
	got := "UINT64"
	if id.IsString {
		got = "BYTES"
	}
	return tritonerr.InvalidArgf("sequence batching control '%s' data-type is '%s', but model '%s' expects '%s'", ctl.Input, got, cfg.GetName(), want.String())
}
