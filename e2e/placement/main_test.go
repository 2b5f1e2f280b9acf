package placement

import (
	"os"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

func TestMain(m *testing.M) { os.Exit(constellation.Main(m)) }
