package tritonflag

import (
	"flag"
	"io"
	"testing"
)

func TestBoolForms(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    bool
		port    string
		wantErr bool
	}{
		{"space form false", []string{"--allow-http", "false", "--port", "9"}, false, "9", false},
		{"space form true", []string{"--allow-http", "true", "--port", "9"}, true, "9", false},
		{"equals form", []string{"--allow-http=false", "--port=9"}, false, "9", false},
		{"default", []string{"--port", "9"}, true, "9", false},
		{"garbage", []string{"--allow-http", "maybe"}, true, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			b := Bool(fs, "allow-http", true, "")
			port := fs.String("port", "", "")
			err := fs.Parse(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if *b != tt.want || *port != tt.port {
				t.Fatalf("got allow-http=%v port=%q, want %v %q", *b, *port, tt.want, tt.port)
			}
		})
	}
}

func TestStringsRepeat(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var s Strings
	fs.Var(&s, "load-model", "")
	if err := fs.Parse([]string{"--load-model", "a", "--load-model", "b"}); err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0] != "a" || s[1] != "b" {
		t.Fatalf("got %v", s)
	}
}
