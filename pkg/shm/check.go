package shm

import (
	"math"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The tensor parameters that place a tensor in a registered region.
const (
	ParamRegion   = "shared_memory_region"
	ParamOffset   = "shared_memory_offset"
	ParamByteSize = "shared_memory_byte_size"
)

// Ref is a tensor's place in a registered region: the region's name, and
// an offset and size relative to the region (not to the shm object).
type Ref struct {
	Region   string
	Offset   uint64
	ByteSize uint64
}

// CheckRange applies Triton's checks of a request's offset and size
// against a region of regionSize bytes (SharedMemoryManager::GetMemoryInfo),
// in Triton's order and with its messages, all INVALID_ARG: the offset must
// fall inside the region, offset+byteSize must not overflow, and must not
// pass the region's end.
func CheckRange(region string, regionSize, offset, byteSize uint64) error {
	if offset >= regionSize {
		return tritonerr.InvalidArgf("Invalid offset for shared memory region: '%s'", region)
	}
	if byteSize > math.MaxUint64-offset {
		return tritonerr.InvalidArgf("Integer overflow detected: byte_size (%d) + offset (%d) exceeds maximum value (%s) for region '%s'",
			byteSize, offset, strconv.FormatUint(math.MaxUint64, 10), region)
	}
	if offset+byteSize > regionSize {
		return tritonerr.InvalidArgf("Invalid offset + byte size for shared memory region: '%s'", region)
	}
	return nil
}

// HasParams reports whether params name a region.
func HasParams(params map[string]*inference.InferParameter) bool {
	_, ok := params[ParamRegion]
	return ok
}

// FromParams reads a tensor's shared_memory_* parameters. ok is false when
// the tensor does not use shared memory.
//
// strict applies the rules of Triton's gRPC front end
// (ParseSharedMemoryParams): the region is a string_param, offset and byte
// size are int64_param (a negative one reads as the huge unsigned number
// Triton's size_t makes of it, and then fails the range check), byte size
// must come with a region, and neither offset nor byte size without one.
// Without strict (requests the gateway decoded from HTTP JSON, where
// pkg/kserve stores values too large for int64 as uint64_param), int64 and
// uint64 values are both accepted.
func FromParams(tensor string, params map[string]*inference.InferParameter, strict bool) (ref Ref, ok bool, err error) {
	rp, hasRegion := params[ParamRegion]
	if hasRegion {
		s, isString := rp.GetParameterChoice().(*inference.InferParameter_StringParam)
		if !isString {
			return Ref{}, false, tritonerr.InvalidArgf("invalid value type for '%s' parameter for tensor '%s', expected string_param.", ParamRegion, tensor)
		}
		ref.Region = s.StringParam
	}
	num := func(key string) (uint64, bool, error) {
		p, present := params[key]
		if !present {
			return 0, false, nil
		}
		if !hasRegion {
			return 0, true, tritonerr.InvalidArgf("'%s' can not be specified without '%s' parameter for tensor '%s'", key, ParamRegion, tensor)
		}
		switch c := p.GetParameterChoice().(type) {
		case *inference.InferParameter_Int64Param:
			return uint64(c.Int64Param), true, nil
		case *inference.InferParameter_Uint64Param:
			if !strict {
				return c.Uint64Param, true, nil
			}
		}
		return 0, true, tritonerr.InvalidArgf("invalid value type for '%s' parameter for tensor '%s', expected int64_param.", key, tensor)
	}
	if ref.Offset, _, err = num(ParamOffset); err != nil {
		return Ref{}, false, err
	}
	var hasSize bool
	if ref.ByteSize, hasSize, err = num(ParamByteSize); err != nil {
		return Ref{}, false, err
	}
	if hasRegion && !hasSize && strict {
		return Ref{}, false, tritonerr.InvalidArgf("'%s' must be specified along with '%s' parameter for tensor '%s'", ParamByteSize, ParamRegion, tensor)
	}
	return ref, hasRegion, nil
}

// Params is the inverse of FromParams: the parameters that place a tensor
// at ref, with offset and byte size as int64_param where they fit (the
// gRPC form) and uint64_param otherwise.
func Params(ref Ref) map[string]*inference.InferParameter {
	num := func(v uint64) *inference.InferParameter {
		if v > math.MaxInt64 {
			return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: v}}
		}
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(v)}}
	}
	return map[string]*inference.InferParameter{
		ParamRegion:   {ParameterChoice: &inference.InferParameter_StringParam{StringParam: ref.Region}},
		ParamOffset:   num(ref.Offset),
		ParamByteSize: num(ref.ByteSize),
	}
}
