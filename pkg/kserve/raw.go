package kserve

import (
	"math"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// DecodeRawRequest decodes a raw binary request (Inference-Header-Content-
// Length: 0): the whole body is the data of the model's only input, as
// Triton deduces it (InferenceRequest::Normalize for raw inputs):
//
//   - the model must have exactly one input;
//   - its dims may hold at most one variable dimension (-1), which is
//     deduced from the body size;
//   - a BYTES input must have dims [1]; the body is that one element and
//     its 4-byte length is prepended here;
//   - the request is batch 1 (a leading 1 when max_batch_size > 0);
//   - every output is requested, and comes back in binary.
//
// A body that does not divide evenly into the deduced shape is left for
// the byte-size check of the executor, as in Triton.
func DecodeRawRequest(body []byte, model, version string, cfg *inference.ModelConfig, opts DecodeOptions) (*inference.ModelInferRequest, *OutputOptions, error) {
	if max := opts.maxInput(); len(body) > max {
		return nil, nil, tritonerr.InvalidArgf(
			"Raw input has a byte_size (%d) that exceeds the maximum allowed value of %d bytes. Use --http-max-input-size to increase the limit.",
			len(body), max)
	}
	if n := len(cfg.GetInput()); n != 1 {
		return nil, nil, tritonerr.InvalidArgf(
			"Raw request must only have 1 input (found 1) to be deduced but got %d inputs in '%s' model configuration", n, model)
	}
	in := cfg.GetInput()[0]
	dt := tensor.FromConfig(in.GetDataType())
	shape := make([]int64, 0, len(in.GetDims())+1)
	if cfg.GetMaxBatchSize() > 0 {
		shape = append(shape, 1)
	}
	dynamic := -1
	fixed := int64(1)
	for _, d := range in.GetDims() {
		if d == -1 {
			if dynamic != -1 {
				return nil, nil, tritonerr.InvalidArgf(
					"The shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension", in.GetName())
			}
			dynamic = len(shape)
		} else if d >= 0 {
			if d != 0 && fixed > math.MaxInt64/d {
				fixed = math.MaxInt64
			} else {
				fixed *= d
			}
		}
		shape = append(shape, d)
	}
	var data []byte
	switch {
	case dt == tensor.Bytes:
		if dynamic != -1 || fixed != 1 {
			return nil, nil, tritonerr.InvalidArgf(
				"For BYTE datatype raw input '%s', the model must have input shape [1]", in.GetName())
		}
		if uint64(len(body)) > math.MaxUint32 {
			return nil, nil, tritonerr.InvalidArgf("raw input '%s' is too large for one BYTES element", in.GetName())
		}
		data = tensor.AppendBytesElement(make([]byte, 0, len(body)+tensor.BytesLenSize), body)
	default:
		data = body[:len(body):len(body)]
		if dynamic != -1 {
			per := fixed * int64(dt.Size())
			if per > 0 {
				shape[dynamic] = int64(len(body)) / per
			} else {
				shape[dynamic] = 0
			}
		}
	}
	req := &inference.ModelInferRequest{
		ModelName:    model,
		ModelVersion: version,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: in.GetName(), Datatype: dt.String(), Shape: shape,
		}},
		RawInputContents: [][]byte{data},
	}
	return req, &OutputOptions{BinaryDefault: true}, nil
}
