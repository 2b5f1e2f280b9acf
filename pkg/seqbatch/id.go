package seqbatch

import (
	"strconv"
	"strings"

	"github.com/nereid-io/nereid/api/busv1"
)

// ID is a correlation id as Triton types it: 42 and "42" are two different
// sequences. The zero value (0 or "") means "not in a sequence". ID is
// comparable and usable as a map key.
type ID struct {
	Uint     uint64
	Str      string
	IsString bool
}

// UintID and StringID make ids.
func UintID(v uint64) ID     { return ID{Uint: v} }
func StringID(s string) ID   { return ID{Str: s, IsString: true} }
func (id ID) IsZero() bool   { return id.Uint == 0 && id.Str == "" }
func (id ID) String() string { return id.text() }

// text prints the id as Triton's messages do: both kinds the same way.
func (id ID) text() string {
	if id.IsString {
		return id.Str
	}
	return strconv.FormatUint(id.Uint, 10)
}

// Key is the id as one string that keeps its type ("u:42", "s:42"), for
// stores.
func (id ID) Key() string {
	if id.IsString {
		return "s:" + id.Str
	}
	return "u:" + strconv.FormatUint(id.Uint, 10)
}

// ParseKey inverts Key.
func ParseKey(k string) (ID, bool) {
	switch {
	case strings.HasPrefix(k, "s:"):
		return StringID(k[2:]), true
	case strings.HasPrefix(k, "u:"):
		v, err := strconv.ParseUint(k[2:], 10, 64)
		return UintID(v), err == nil
	}
	return ID{}, false
}

// Proto and FromProto convert to and from the bus form.
func (id ID) Proto() *busv1.CorrelationId {
	return &busv1.CorrelationId{UintId: id.Uint, StringId: id.Str, IsString: id.IsString}
}

func FromProto(p *busv1.CorrelationId) ID {
	if p.GetIsString() {
		return StringID(p.GetStringId())
	}
	return UintID(p.GetUintId())
}
