package gateway

import (
	"strconv"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// latestVersion is what an empty version string means: the highest ready
// version (Triton uses -1 the same way).
const latestVersion int64 = -1

// parseVersion reads a client's model version string as Triton's
// GetModelVersionFromString does, with the same messages. Triton uses
// std::stol, which also accepts a numeric prefix ("1abc" is version 1); we
// require the whole string to be an integer, since a typo should not silently
// select a version.
func parseVersion(s string) (int64, error) {
	if s == "" {
		return latestVersion, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, tritonerr.InvalidArgf("failed to get model version from specified version string '%s' (details: stol), version should be an integral value > 0", s)
	}
	if v < 0 {
		return 0, tritonerr.InvalidArgf("invalid model version specified '%s' , version should be an integral value > 0", s)
	}
	return v, nil
}
