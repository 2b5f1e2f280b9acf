//go:build unix

package fdlimit

import (
	"os"
	"testing"
)

// TestRaiseAndOpen: the soft limit ends at the hard one, and a file opened
// counts one more descriptor, closed one fewer.
func TestRaiseAndOpen(t *testing.T) {
	l, err := Raise()
	if err != nil {
		t.Fatal(err)
	}
	if l.Soft == 0 || (l.Soft < l.Hard && l.Soft < 1<<20) {
		t.Fatalf("after Raise: %+v", l)
	}
	before, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	during, _ := Open()
	f.Close()
	after, _ := Open()
	if during != before+1 || after != before {
		t.Fatalf("open descriptors %d, with a file %d, after closing it %d", before, during, after)
	}
}
