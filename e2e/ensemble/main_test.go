// Package ensemble runs ensembles through a constellation of real
// binaries: the ensembles live in one executor's repository, their
// composing model in another's, and the gateway runs the steps.
package ensemble

import (
	"os"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

func TestMain(m *testing.M) { os.Exit(constellation.Main(m)) }
