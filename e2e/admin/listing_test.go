package admin

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/adminv1"
)

// The listings follow the constellation as executors and gateways join and
// leave, over gRPC and REST alike.
func TestListingFollowsTheConstellation(t *testing.T) {
	e := start(t, []string{"exec-a", "exec-b"})
	second := e.c.Gateway()
	host, _ := os.Hostname()

	// Executors: both, with their models, instances and node.
	waitFor(t, "both executors listed", func() bool { return slices.Equal(sorted(e.executorIDs(t)), []string{"exec-a", "exec-b"}) })
	r, err := e.admin.ListExecutors(ctx(t), &adminv1.ListExecutorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range r.GetExecutors() {
		if x.GetNode() != host || x.GetDrainState() != adminv1.DrainState_DRAIN_STATE_SERVING || x.GetStartedUnixMs() == 0 {
			t.Errorf("executor %s: node %q (want %q), drain %v, started %d", x.GetId(), x.GetNode(), host, x.GetDrainState(), x.GetStartedUnixMs())
		}
		loaded := map[string]*adminv1.LoadedModel{}
		for _, m := range x.GetModels() {
			if m.GetState() == "READY" {
				loaded[m.GetName()] = m
			}
		}
		for _, name := range models {
			m := loaded[name]
			if m == nil || m.GetVersion() != "1" || len(m.GetInstances()) == 0 {
				t.Errorf("executor %s: model %s not listed loaded with instances: %v", x.GetId(), name, m)
				continue
			}
			if m.GetSequence() != (name == seqModel) {
				t.Errorf("executor %s: model %s sequence=%v", x.GetId(), name, m.GetSequence())
			}
		}
		if n := len(loaded[seqModel].GetInstances()); n != 2 {
			t.Errorf("executor %s: %d instances of %s, want the config's 2", x.GetId(), n, seqModel)
		}
		if len(x.GetGpus()) == 0 && x.GetGpuNote() == "" {
			t.Errorf("executor %s: no GPU listed and no reason given", x.GetId())
		}
	}

	// Gateways: both, this one with its admin address.
	waitFor(t, "both gateways listed", func() bool {
		g, err := e.admin.ListGateways(ctx(t), &adminv1.ListGatewaysRequest{})
		return err == nil && len(g.GetGateways()) == 2
	})
	g, _ := e.admin.ListGateways(ctx(t), &adminv1.ListGatewaysRequest{})
	var withAdmin int
	for _, x := range g.GetGateways() {
		if x.GetAdminAddress() != "" {
			withAdmin++
			if !strings.HasSuffix(x.GetGrpcAddress(), fmt.Sprintf(":%d", e.g.GRPCPort)) {
				t.Errorf("admin gateway's gRPC address %q, port %d", x.GetGrpcAddress(), e.g.GRPCPort)
			}
		}
	}
	if withAdmin != 1 {
		t.Errorf("%d gateways with an admin address, want 1: %v", withAdmin, g.GetGateways())
	}

	// The sequence router leads the sequence model once an executor asked
	// it to, with both executors' instances.
	waitFor(t, "the router leading the sequence model with both executors' instances", func() bool {
		rt, m := e.routerModel(t)
		return rt != nil && rt.GetId() == "router0" && len(m.GetExecutors()) == 2 && m.GetEpoch() > 0 && m.GetSlots() > 0
	})

	// A shared-memory region registered through the gateway, on its node.
	key := fmt.Sprintf("nereid-admin-%d", os.Getpid())
	if err := os.WriteFile(filepath.Join("/dev/shm", key), make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join("/dev/shm", key)) })
	var reg map[string]any
	if code := doJSON(t, "POST", e.g.HTTP()+"/v2/systemsharedmemory/region/in0/register", nil,
		[]byte(`{"key":"/`+key+`","offset":4096,"byte_size":32}`), &reg); code != 200 {
		t.Fatalf("register: %d %v", code, reg)
	}
	regions, err := e.admin.ListShmRegions(ctx(t), &adminv1.ListShmRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := regions.GetNodes(); len(n) != 1 || n[0].GetNode() != host || len(n[0].GetRegions()) != 1 ||
		n[0].GetRegions()[0].GetName() != "in0" || n[0].GetRegions()[0].GetKey() != "/"+key ||
		n[0].GetRegions()[0].GetOffset() != 4096 || n[0].GetRegions()[0].GetByteSize() != 32 || n[0].GetRegions()[0].GetKind() != "system" {
		t.Fatalf("regions: %v", n)
	}

	// The same over REST, in the proto's field names.
	var restExecs struct {
		Executors []struct {
			ID     string `json:"id"`
			Models []struct {
				Name string `json:"name"`
			} `json:"models"`
			DrainState string `json:"drain_state"`
		} `json:"executors"`
	}
	if code := getJSON(t, e.adminURL+"/v1/admin/executors", nil, &restExecs); code != 200 || len(restExecs.Executors) != 2 ||
		restExecs.Executors[0].ID != "exec-a" || restExecs.Executors[1].ID != "exec-b" || restExecs.Executors[0].DrainState != "DRAIN_STATE_SERVING" {
		t.Fatalf("REST executors: %d %+v", code, restExecs)
	}
	var restRegions struct {
		Nodes []struct {
			Node    string `json:"node"`
			Regions []struct {
				Name string `json:"name"`
			} `json:"regions"`
		} `json:"nodes"`
	}
	if code := getJSON(t, e.adminURL+"/v1/admin/shm-regions", nil, &restRegions); code != 200 || len(restRegions.Nodes) != 1 ||
		restRegions.Nodes[0].Regions[0].Name != "in0" {
		t.Fatalf("REST regions: %d %+v", code, restRegions)
	}
	var restRouters struct {
		Routers []struct {
			ID     string `json:"id"`
			Models []struct {
				Name  string `json:"name"`
				Slots string `json:"slots"` // int64: a JSON string in proto3 JSON
			} `json:"models"`
		} `json:"routers"`
	}
	if code := getJSON(t, e.adminURL+"/v1/admin/sequence-routers", nil, &restRouters); code != 200 || len(restRouters.Routers) != 1 ||
		restRouters.Routers[0].ID != "router0" || len(restRouters.Routers[0].Models) != 1 || restRouters.Routers[0].Models[0].Name != seqModel {
		t.Fatalf("REST routers: %d %+v", code, restRouters)
	}
	var restGateways struct {
		Gateways []struct {
			ID string `json:"id"`
		} `json:"gateways"`
	}
	if code := getJSON(t, e.adminURL+"/v1/admin/gateways", nil, &restGateways); code != 200 || len(restGateways.Gateways) != 2 {
		t.Fatalf("REST gateways: %d %+v", code, restGateways)
	}

	// Leaving: an executor and a gateway stop; joining: another executor.
	e.execs["exec-b"].Stop()
	second.Stop()
	waitFor(t, "exec-b gone from the listing", func() bool { return slices.Equal(e.executorIDs(t), []string{"exec-a"}) })
	waitFor(t, "the second gateway gone from the listing", func() bool {
		g, err := e.admin.ListGateways(ctx(t), &adminv1.ListGatewaysRequest{})
		return err == nil && len(g.GetGateways()) == 1 && g.GetGateways()[0].GetAdminAddress() != ""
	})
	waitFor(t, "exec-b's instances gone from the router", func() bool {
		_, m := e.routerModel(t)
		return len(m.GetExecutors()) == 1 && m.GetExecutors()[0].GetId() == "exec-a"
	})
	e.startExecutor(t, "exec-c")
	waitFor(t, "exec-c listed", func() bool { return slices.Equal(sorted(e.executorIDs(t)), []string{"exec-a", "exec-c"}) })
	if code := getJSON(t, e.adminURL+"/v1/admin/executors", http.Header{}, &restExecs); code != 200 || len(restExecs.Executors) != 2 ||
		restExecs.Executors[1].ID != "exec-c" {
		t.Fatalf("REST executors after the join: %d %+v", code, restExecs)
	}
}
