package tritonerr

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMappings(t *testing.T) {
	tests := []struct {
		kind Kind
		http int
		grpc codes.Code
	}{
		{Unknown, http.StatusBadRequest, codes.Unknown},
		{Internal, http.StatusInternalServerError, codes.Internal},
		{NotFound, http.StatusNotFound, codes.NotFound},
		{InvalidArg, http.StatusBadRequest, codes.InvalidArgument},
		{Unavailable, http.StatusServiceUnavailable, codes.Unavailable},
		{Unsupported, http.StatusNotImplemented, codes.Unimplemented},
		{AlreadyExists, http.StatusBadRequest, codes.AlreadyExists},
		{Cancelled, http.StatusBadRequest, codes.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			if got := tt.kind.HTTPStatus(); got != tt.http {
				t.Errorf("HTTPStatus = %d, want %d", got, tt.http)
			}
			if got := tt.kind.GRPCCode(); got != tt.grpc {
				t.Errorf("GRPCCode = %v, want %v", got, tt.grpc)
			}
			if got := ParseKind(tt.kind.String()); got != tt.kind {
				t.Errorf("ParseKind(%q) = %v", tt.kind.String(), got)
			}
			if tt.kind != Unknown && KindFromGRPC(tt.grpc) != tt.kind {
				t.Errorf("KindFromGRPC(%v) = %v", tt.grpc, KindFromGRPC(tt.grpc))
			}
		})
	}
}

func TestWrappedKeepsGRPCCode(t *testing.T) {
	err := fmt.Errorf("context: %w", NotFoundf("Request for unknown model: '%s' is not found", "x"))
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.NotFound {
		t.Fatalf("status.FromError = %v, %v; want NotFound", s, ok)
	}
	got := From(err)
	if got.Kind != NotFound || got.Msg != "context: Request for unknown model: 'x' is not found" {
		t.Fatalf("From = %+v", got)
	}
}

func TestFromForeign(t *testing.T) {
	if From(nil) != nil {
		t.Fatal("From(nil) != nil")
	}
	if got := From(errors.New("boom")); got.Kind != Internal || got.Msg != "boom" {
		t.Fatalf("From(foreign) = %+v", got)
	}
	if got := From(status.Error(codes.Unavailable, "gone")); got.Kind != Unavailable || got.Msg != "gone" {
		t.Fatalf("From(grpc) = %+v", got)
	}
}
