package probe

import (
	"net/http"
	"testing"
)

func TestReadiness(t *testing.T) {
	ready := make(chan struct{})
	s, err := Listen("127.0.0.1:0", ready)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func(path string) int {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/livez"); got != 200 {
		t.Fatalf("/livez = %d", got)
	}
	if got := get("/readyz"); got != 503 {
		t.Fatalf("/readyz before ready = %d, want 503", got)
	}
	close(ready)
	if got := get("/readyz"); got != 200 {
		t.Fatalf("/readyz after ready = %d, want 200", got)
	}
	var nilServer *Server
	if nilServer.Addr() != "" || nilServer.Close() != nil {
		t.Fatal("nil server must be inert")
	}
}
