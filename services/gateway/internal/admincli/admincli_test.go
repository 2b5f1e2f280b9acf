package admincli

import (
	"context"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/adminv1"
)

func TestRunRefusesBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: nereidctl"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"drain"}, "drain needs one executor id"},
		{[]string{"drain", "a", "b"}, "drain needs one executor id"},
		{[]string{"drain-status", ""}, "drain-status needs one executor id"},
		{[]string{"undrain"}, "undrain needs one executor id"},
		{[]string{"executors", "x"}, "executors takes no arguments"},
		{[]string{"placement", "x"}, "placement takes no arguments"},
		{[]string{"pin", "m"}, "pin needs a model and at least one executor id"},
		{[]string{"unpin"}, "unpin needs one model"},
		{[]string{"unpin", "a", "b"}, "unpin needs one model"},
	} {
		// The client is never reached: a nil one would panic.
		err := Run(context.Background(), nil, tc.args, "", &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestTables(t *testing.T) {
	var b strings.Builder
	err := WriteExecutors(&b, &adminv1.ListExecutorsResponse{
		Executors: []*adminv1.Executor{{
			Id: "e1", Node: "n1", InflightRequests: 3, DrainState: adminv1.DrainState_DRAIN_STATE_DRAINING,
			Gpus: []*adminv1.Gpu{{Index: 0, Name: "H200"}},
			Models: []*adminv1.LoadedModel{
				{Name: "simple", Version: "1", State: "READY", Instances: []*adminv1.ModelInstance{{Name: "simple_0"}, {Name: "simple_1"}}},
				{Name: "broken", Version: "1", State: "UNAVAILABLE"},
				{Name: "on_disk_only"},
			},
		}},
		Unreachable: []*adminv1.Unreachable{{Id: "e2", Error: "timed out"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows:\n%s", b.String())
	}
	for _, want := range []string{"e1", "n1", "0:H200", "simple/1,broken/1(UNAVAILABLE)", " 2 ", " 3 ", "draining"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row %q lacks %q", lines[1], want)
		}
	}
	if strings.Contains(lines[1], "on_disk_only") {
		t.Errorf("a model not loaded is listed: %q", lines[1])
	}
	if !strings.Contains(lines[2], "e2") || !strings.Contains(lines[2], "unreachable: timed out") {
		t.Errorf("unreachable row %q", lines[2])
	}

	b.Reset()
	err = WriteRouters(&b, &adminv1.ListSequenceRoutersResponse{Routers: []*adminv1.SequenceRouter{
		{Id: "r1", Models: []*adminv1.RouterModel{{Name: "seq", Version: "1", Epoch: 4, ActiveSequences: 2, Slots: 8, SlotsInUse: 2,
			BacklogSequences: 1, BacklogRequests: 3,
			Executors: []*adminv1.RouterExecutor{{Id: "e1", ActiveSequences: 2, Draining: true}, {Id: "e2"}}}}},
		{Id: "r2"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"seq/1", " 4 ", "2/8", "1 (3 requests)", "e1:2(draining),e2:0", "r2"} {
		if !strings.Contains(out, want) {
			t.Errorf("routers table lacks %q:\n%s", want, out)
		}
	}

	b.Reset()
	err = WriteRegions(&b, &adminv1.ListShmRegionsResponse{Nodes: []*adminv1.ShmNode{{Node: "n1", Regions: []*adminv1.ShmRegion{
		{Name: "in", Kind: "system", Key: "/k", Offset: 16, ByteSize: 64},
		{Name: "out", Kind: "cuda", DeviceId: 1, ByteSize: 32, AwaitingUnregister: true},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{"/k+16", "device 1", "awaiting unregister", "n1"} {
		if !strings.Contains(out, want) {
			t.Errorf("regions table lacks %q:\n%s", want, out)
		}
	}
}

func TestDescribeDrain(t *testing.T) {
	got := DescribeDrain(&adminv1.DrainStatus{ExecutorId: "e1", State: adminv1.DrainState_DRAIN_STATE_DRAINING, WaitingFor: "2 requests in flight"})
	if got != "executor e1: draining (waiting for 2 requests in flight)" {
		t.Fatalf("got %q", got)
	}
	if got := DescribeDrain(&adminv1.DrainStatus{ExecutorId: "e1", State: adminv1.DrainState_DRAIN_STATE_DRAINED}); got != "executor e1: drained" {
		t.Fatalf("got %q", got)
	}
}

func TestRestrictedMetadata(t *testing.T) {
	f := Flags{Restricted: "Admin-Key=s=cret"}
	k, v, err := f.Metadata()
	if err != nil || k != "triton-grpc-protocol-admin-key" || v != "s=cret" {
		t.Fatalf("got %q %q %v", k, v, err)
	}
	f.Restricted = "novalue"
	if _, _, err := f.Metadata(); err == nil {
		t.Fatal("a restriction without '=' was accepted")
	}
}

func TestPlacementTable(t *testing.T) {
	var b strings.Builder
	err := WritePlacement(&b, &adminv1.Placement{
		ControllerId: "router0",
		Models: []*adminv1.PlacedModel{
			{Name: "m0", Executors: []string{"e1", "e2"}, FootprintBytes: 3 << 30, GpuFootprintBytes: 5 << 30, MaxReplicas: 2, Pinned: true},
			{Name: "m1"},
		},
		Executors: []*adminv1.PlacementExecutor{
			{Id: "e1", Node: "n1", CapacityBytes: 16 << 30, CapacitySlots: 3, HeldBytes: 3 << 30, HeldModels: 1, Draining: true,
				Gpu: true, GpuCapacityBytes: 80 << 30, HeldGpuBytes: 5 << 30},
		},
		Waiting: []*adminv1.WaitingModel{{Model: "m1", Why: "no executor has room for it", Demanded: true}},
		Pins:    []*adminv1.ModelPin{{Model: "m7", Executors: []string{"e3", "e4"}}},
		Decisions: []*adminv1.PlacementDecision{
			{UnixMs: 1000, Action: "unload", Model: "m2", Executor: "e1", Reason: "least recently used, evicted", ForModel: "m0"},
			{UnixMs: 2000, Action: "load", Model: "m0", Executor: "e1", Reason: "on demand", Error: "load failed"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"controller router0", "e1,e2", "3.0GiB", "pinned", "default", "16.0GiB / 3 slots", "3.0GiB / 1 models",
		"draining", "5.0GiB / 80.0GiB", "no executor has room for it", "least recently used, evicted for m0", "on demand (failed: load failed)",
		"PINNED", "m7      e3,e4"} {
		if !strings.Contains(out, want) {
			t.Errorf("placement tables lack %q:\n%s", want, out)
		}
	}
}
