package gpu

import (
	"strings"
)

// normalizeBusID spells a PCI bus id as NVML does ("00000000:3B:00.0"):
// CUDA writes a 4-digit domain ("0000:3b:00.0") and NVML an 8-digit one,
// and they disagree on case.
func normalizeBusID(s string) string {
	s = strings.ToUpper(strings.TrimRight(s, "\x00"))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	if len(dom) < 8 {
		dom = strings.Repeat("0", 8-len(dom)) + dom
	}
	return dom + ":" + rest
}
