// Package probe serves the liveness and readiness endpoints that orchestrators
// poll (/livez, /readyz) for services that have no HTTP API of their own.
package probe

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Server answers /livez with 200 while the process runs and /readyz with 200
// once ready is closed, 503 before.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{} // closed when Serve has returned
}

// Listen starts serving on addr ("" disables: a nil *Server is valid).
func Listen(addr string, ready <-chan struct{}) (*Server, error) {
	return ListenWith(addr, ready, nil)
}

// ListenWith is Listen with more handlers on the same port, by mux pattern
// ("GET /metrics").
func ListenWith(addr string, ready <-chan struct{}, extra map[string]http.Handler) (*Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-ready:
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	for pattern, h := range extra {
		mux.Handle(pattern, h)
	}
	return Serve(addr, mux)
}

// Serve serves h on addr until Close ("" disables: a nil *Server is
// valid): the plain HTTP server a service runs beside its API, such as
// its /metrics endpoint.
func Serve(addr string, h http.Handler) (*Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener was closed under us; nothing to report to
		}
	}()
	return s, nil
}

// Addr is the address actually listened on.
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops the server, giving requests in flight a second, and waits
// for its serving goroutine.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
