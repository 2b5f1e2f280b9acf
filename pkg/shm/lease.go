package shm

import (
	"encoding/base64"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// LeaseParam is the request parameter in which a gateway hands an executor
// the regions it holds for a request (busv1.ShmLease, base64: parameters
// are strings, and protobuf strings must be UTF-8). Gateways drop any
// client-supplied value; executors remove it before the backend sees the
// request.
const LeaseParam = "nereid_shm_lease"

// SetLease stores lease in the request's parameters.
func SetLease(req *inference.ModelInferRequest, lease *busv1.ShmLease) error {
	b, err := proto.Marshal(lease)
	if err != nil {
		return tritonerr.Internalf("encoding shared memory lease: %v", err)
	}
	if req.Parameters == nil {
		req.Parameters = map[string]*inference.InferParameter{}
	}
	req.Parameters[LeaseParam] = &inference.InferParameter{
		ParameterChoice: &inference.InferParameter_StringParam{StringParam: base64.StdEncoding.EncodeToString(b)}}
	return nil
}

// TakeLease removes the lease from the request's parameters and returns it
// (nil when there is none).
func TakeLease(req *inference.ModelInferRequest) (*busv1.ShmLease, error) {
	p, ok := req.GetParameters()[LeaseParam]
	if !ok {
		return nil, nil
	}
	delete(req.Parameters, LeaseParam)
	b, err := base64.StdEncoding.DecodeString(p.GetStringParam())
	if err != nil {
		return nil, tritonerr.InvalidArgf("malformed shared memory lease: %v", err)
	}
	lease := &busv1.ShmLease{}
	if err := proto.Unmarshal(b, lease); err != nil {
		return nil, tritonerr.InvalidArgf("malformed shared memory lease: %v", err)
	}
	return lease, nil
}
