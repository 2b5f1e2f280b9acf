package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// TestUploadBudget: the files of load requests are bounded by the
// executor's budget, not by the disk. A load larger than the whole budget
// is an invalid argument; one that fits alone but not beside the uploads
// already held is unavailable until one is unloaded; a reload of the same
// model counts its new files in place of its old ones.
func TestUploadBudget(t *testing.T) {
	url := startNATS(t)
	client, err := bus.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	runExecutor(t, url, Config{RepositoryPath: t.TempDir(), ControlMode: ControlExplicit, ID: "ex-1", Node: "node-a",
		BackendDirectory: t.TempDir(), UploadBudget: 1000})
	files := func(n int) map[string][]byte { return map[string][]byte{"1/weights.bin": make([]byte, n)} }

	rep := loadFiles(t, client, "a", uploadConfig("identity"), files(1001))
	if tritonerr.ParseKind(rep.GetErrorKind()) != tritonerr.InvalidArg || !strings.Contains(rep.GetError(), "take 1001 bytes, over the 1000 bytes") ||
		!strings.Contains(rep.GetError(), UploadBudgetFlag) {
		t.Fatalf("load over the whole budget: %q %q", rep.GetErrorKind(), rep.GetError())
	}
	if rep := loadFiles(t, client, "a", uploadConfig("identity"), files(600)); rep.GetError() != "" {
		t.Fatalf("load within the budget: %s", rep.GetError())
	}
	rep = loadFiles(t, client, "b", uploadConfig("identity"), files(600))
	if tritonerr.ParseKind(rep.GetErrorKind()) != tritonerr.Unavailable || !strings.Contains(rep.GetError(), "already hold 600 of the 1000 bytes") {
		t.Fatalf("load beside another upload over the budget: %q %q", rep.GetErrorKind(), rep.GetError())
	}
	// A reload of a with other files replaces its 600 bytes.
	if rep := loadFiles(t, client, "a", uploadConfig("identity"), files(900)); rep.GetError() != "" {
		t.Fatalf("reload of a within the budget: %s", rep.GetError())
	}
	if rep := loadFiles(t, client, "b", uploadConfig("identity"), files(200)); !strings.Contains(rep.GetError(), "already hold 900") {
		t.Fatalf("b beside a's 900 bytes: %q", rep.GetError())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Request(ctx, bus.ModelControlSubject, &busv1.ModelControlRequest{Name: "a"}, &busv1.ModelControlReply{}); err != nil {
		t.Fatal(err)
	}
	if rep := loadFiles(t, client, "b", uploadConfig("identity"), files(600)); rep.GetError() != "" {
		t.Fatalf("load after the other upload was unloaded: %s", rep.GetError())
	}
}
