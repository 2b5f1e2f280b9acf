package kserve

import "github.com/nereid-io/nereid/pkg/infercodec"

// maxEncodedOutputs and maxEncodedDims bound what
// EncodeInferResponseEncoded keeps on its stack; a response with more
// outputs or dimensions is left to EncodeInferResponseParts.
const (
	maxEncodedOutputs = 8
	maxEncodedDims    = 16
)

// EncodeInferResponseEncoded is EncodeInferResponseParts for a response in
// its protobuf encoding, as infercodec.Canonical accepts it (the
// executor's reply, passed on without being decoded): the same header and
// blobs, the blobs aliasing msg and appended to buf (which may lie on the
// caller's stack; nil when the response is JSON only). ok is false when msg is not in that form
// or holds what this encoder leaves to the decoded path (response
// parameters, more than maxEncodedOutputs outputs or maxEncodedDims
// dimensions, an output it cannot write); the caller then decodes msg and
// calls EncodeInferResponseParts, which gives the answer or the error.
func EncodeInferResponseEncoded(msg []byte, opts *OutputOptions, buf [][]byte) (header []byte, blobs [][]byte, ok bool) {
	return EncodeInferResponseEncodedTo(nil, msg, opts, buf)
}

// EncodeInferResponseEncodedTo is EncodeInferResponseEncoded writing the
// header into dst's memory when it has room enough (a buffer the caller
// reuses once the header is written out), else into memory of its own.
func EncodeInferResponseEncodedTo(dst, msg []byte, opts *OutputOptions, buf [][]byte) (header []byte, blobs [][]byte, ok bool) {
	var outBuf, rawBuf [maxEncodedOutputs][]byte
	v, good := infercodec.ViewResponse(msg, outBuf[:0], rawBuf[:0])
	if !good || v.Parameters || len(v.Outputs) > maxEncodedOutputs || len(v.RawOutputContents) > maxEncodedOutputs {
		return nil, nil, false
	}
	raw, nRaw := v.RawOutputContents, len(v.RawOutputContents)

	size := 128 + len(v.ModelName) + len(v.ID) + len(v.ModelVersion)
	var binary [maxEncodedOutputs]bool
	anyBinary := false
	for i, o := range v.Outputs {
		name, _, _, good := infercodec.ViewOutput(o, nil, maxEncodedDims)
		if !good {
			return nil, nil, false
		}
		size += 96 + len(o)
		if ro := opts.output(name); ro != nil && ro.SharedMemory != nil {
			continue
		}
		binary[i] = opts.Binary(name)
		anyBinary = anyBinary || binary[i]
		if !binary[i] && i < nRaw {
			size += 3*len(raw[i]) + 16
		}
	}

	b := dst[:0]
	if cap(b) < size {
		b = make([]byte, 0, size)
	}
	b = appendResponseHead(b, v.ID, v.ModelName, v.ModelVersion)
	b = append(b, `,"outputs":[`...)
	var dims [maxEncodedDims]int64
	for i, o := range v.Outputs {
		if i > 0 {
			b = append(b, ',')
		}
		name, datatype, shape, good := infercodec.ViewOutput(o, dims[:0], maxEncodedDims)
		if !good {
			return nil, nil, false
		}
		var data []byte
		if i < nRaw {
			data = raw[i]
		}
		ro := opts.output(name)
		var err error
		if b, err = appendOutput(b, name, datatype, shape, ro != nil && ro.SharedMemory != nil, binary[i], data); err != nil {
			// An output that cannot be written (a bad datatype or shape):
			// the decoded path says so, with strings of its own.
			return nil, nil, false
		}
	}
	b = append(b, "]}"...)
	if !anyBinary {
		return b, nil, true
	}
	blobs = buf[:0]
	for i := range v.Outputs {
		if binary[i] {
			var data []byte
			if i < nRaw {
				data = raw[i]
			}
			blobs = append(blobs, data)
		}
	}
	return b, blobs, true
}
