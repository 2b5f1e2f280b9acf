// Package tritonerr is the one error type of Nereid. An Error carries one of
// Triton's error kinds and a message; the kind decides the HTTP status (Triton's
// table), the gRPC code and the NATS reply headers, and the error is rebuilt
// intact on the far side of every hop. Domain code returns *Error; only the
// edges (HTTP, gRPC, bus) translate it.
package tritonerr

import (
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind is one of Triton's error kinds (TRITONSERVER_Error_Code).
type Kind uint8

// The kinds, in the order of TRITONSERVER_Error_Code. Unknown is the zero
// value so that a missing kind never reads as success.
const (
	Unknown Kind = iota
	Internal
	NotFound
	InvalidArg
	Unavailable
	Unsupported
	AlreadyExists
	Cancelled
)

var kindNames = [...]string{
	Unknown:       "UNKNOWN",
	Internal:      "INTERNAL",
	NotFound:      "NOT_FOUND",
	InvalidArg:    "INVALID_ARG",
	Unavailable:   "UNAVAILABLE",
	Unsupported:   "UNSUPPORTED",
	AlreadyExists: "ALREADY_EXISTS",
	Cancelled:     "CANCELLED",
}

// String returns Triton's name of the kind, e.g. "INVALID_ARG".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return kindNames[Unknown]
}

// ParseKind is the inverse of Kind.String; unrecognised names give Unknown.
func ParseKind(s string) Kind {
	for k, n := range kindNames {
		if n == s {
			return Kind(k)
		}
	}
	return Unknown
}

// HTTPStatus maps the kind as Triton's HttpCodeFromError does: everything that
// is not INTERNAL, NOT_FOUND, UNAVAILABLE or UNSUPPORTED is a 400.
func (k Kind) HTTPStatus() int {
	switch k {
	case Internal:
		return http.StatusInternalServerError
	case NotFound:
		return http.StatusNotFound
	case Unavailable:
		return http.StatusServiceUnavailable
	case Unsupported:
		return http.StatusNotImplemented
	default:
		return http.StatusBadRequest
	}
}

// GRPCCode maps the kind as Triton's CodeToStatus does.
func (k Kind) GRPCCode() codes.Code {
	switch k {
	case Internal:
		return codes.Internal
	case NotFound:
		return codes.NotFound
	case InvalidArg:
		return codes.InvalidArgument
	case Unavailable:
		return codes.Unavailable
	case Unsupported:
		return codes.Unimplemented
	case AlreadyExists:
		return codes.AlreadyExists
	case Cancelled:
		return codes.Canceled
	default:
		return codes.Unknown
	}
}

// KindFromGRPC maps a gRPC code back to a kind, for errors that arrive from a
// gRPC peer rather than from our own bus.
func KindFromGRPC(c codes.Code) Kind {
	switch c {
	case codes.Internal:
		return Internal
	case codes.NotFound:
		return NotFound
	case codes.InvalidArgument:
		return InvalidArg
	case codes.Unavailable, codes.DeadlineExceeded:
		return Unavailable
	case codes.Unimplemented:
		return Unsupported
	case codes.AlreadyExists:
		return AlreadyExists
	case codes.Canceled:
		return Cancelled
	default:
		return Unknown
	}
}

// Error is an error with a Triton kind. Its message is what clients see,
// verbatim, so it follows Triton's wording wherever Triton's is known.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// GRPCStatus lets grpc-go find the code even through %w wrapping.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Kind.GRPCCode(), e.Msg) }

// New returns an error of the given kind with a formatted message.
func New(k Kind, format string, args ...any) *Error {
	if len(args) == 0 {
		return &Error{Kind: k, Msg: format}
	}
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Shorthands for the common kinds.
func InvalidArgf(format string, args ...any) *Error  { return New(InvalidArg, format, args...) }
func NotFoundf(format string, args ...any) *Error    { return New(NotFound, format, args...) }
func Unavailablef(format string, args ...any) *Error { return New(Unavailable, format, args...) }
func Unsupportedf(format string, args ...any) *Error { return New(Unsupported, format, args...) }
func Internalf(format string, args ...any) *Error    { return New(Internal, format, args...) }

// From finds the Triton error in err's chain. An error without one becomes
// INTERNAL with err's text (a gRPC status error keeps its code's kind);
// nil stays nil.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var te *Error
	if errors.As(err, &te) {
		if te.Msg == err.Error() {
			return te
		}
		// Keep the wrapping context in the message, the kind from the cause.
		return &Error{Kind: te.Kind, Msg: err.Error()}
	}
	if s, ok := status.FromError(err); ok {
		return &Error{Kind: KindFromGRPC(s.Code()), Msg: s.Message()}
	}
	return &Error{Kind: Internal, Msg: err.Error()}
}

// KindOf returns the kind of err (INTERNAL for foreign errors, Unknown for nil).
func KindOf(err error) Kind {
	if err == nil {
		return Unknown
	}
	return From(err).Kind
}
