package validate

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// The subset of Kubernetes objects the chart checks look at.
type (
	manifest struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			Replicas        *int `yaml:"replicas"`
			MinReadySeconds int  `yaml:"minReadySeconds"`
			// A Service's
			InternalTrafficPolicy string `yaml:"internalTrafficPolicy"`
			Template              struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
			Ports []struct {
				Name string `yaml:"name"`
				Port int    `yaml:"port"`
			} `yaml:"ports"` // a Service's
		} `yaml:"spec"`
	}
	podSpec struct {
		HostIPC      bool              `yaml:"hostIPC"`
		NodeSelector map[string]string `yaml:"nodeSelector"`
		Containers   []container       `yaml:"containers"`
		Volumes      []struct {
			Name     string `yaml:"name"`
			EmptyDir *struct {
				Medium    string `yaml:"medium"`
				SizeLimit string `yaml:"sizeLimit"`
			} `yaml:"emptyDir"`
		} `yaml:"volumes"`
	}
	container struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Lifecycle *struct {
			PreStop *struct {
				Exec *struct {
					Command []string `yaml:"command"`
				} `yaml:"exec"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		StartupProbe   *probe `yaml:"startupProbe"`
		Resources      struct {
			Limits map[string]any `yaml:"limits"`
		} `yaml:"resources"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
)

// TestChartManifests checks manifests rendered by `helm template` (make
// helm-lint passes their paths in NEREID_HELM_MANIFESTS, comma-separated):
// every flag the chart passes exists in the service's main, probes ask the
// endpoints the services serve, /dev/shm is sized or shared, GPU executors
// ask for GPUs. Without helm it skips: `make test` does not build helm.
func TestChartManifests(t *testing.T) {
	env := os.Getenv("NEREID_HELM_MANIFESTS")
	if env == "" {
		t.Skip("NEREID_HELM_MANIFESTS not set; run make helm-lint")
	}
	for _, file := range strings.Split(env, ",") {
		t.Run(path.Base(file), func(t *testing.T) { checkChart(t, file) })
	}
}

func checkChart(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []manifest
	dec := yaml.NewDecoder(f)
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m.Kind != "" {
			docs = append(docs, m)
		}
	}

	// The gateways' admin API, when the chart enables it: its Service and
	// gRPC port, which executors drain through before they stop.
	var adminSvc string
	var adminPort int
	for _, m := range docs {
		if m.Kind == "Service" && strings.HasSuffix(m.Metadata.Name, "-gateway-admin") {
			adminSvc = m.Metadata.Name
			for _, p := range m.Spec.Ports {
				if p.Name == "admin" {
					adminPort = p.Port
				}
			}
		}
	}

	seen := map[string]bool{}
	for _, m := range docs {
		if m.Kind == "Service" && strings.HasSuffix(m.Metadata.Name, "-gateway") {
			ports := map[string]int{}
			for _, p := range m.Spec.Ports {
				ports[p.Name] = p.Port
			}
			if ports["http"] != 8000 || ports["grpc"] != 8001 || ports["metrics"] != 8002 {
				t.Errorf("gateway Service ports %v, want http 8000, grpc 8001, metrics 8002", ports)
			}
		}
		if m.Kind != "Deployment" && m.Kind != "DaemonSet" {
			continue
		}
		pod := m.Spec.Template.Spec
		for _, c := range pod.Containers {
			svc, ok := nereidService(c.Image)
			if !ok {
				continue
			}
			seen[svc] = true
			what := file + " " + m.Kind + "/" + m.Metadata.Name
			checkArgs(t, what, svc, expandEnv(t, what, c))
			switch svc {
			case "gateway":
				wantProbe(t, what, c.LivenessProbe, "/v2/health/live")
				wantProbe(t, what, c.ReadinessProbe, "/v2/health/ready")
				wantDevShm(t, what, pod, c)
				wantNode(t, what, pod, c)
				if v, _ := argValue(c.Args, "admin-port"); adminSvc != "" && v != strconv.Itoa(adminPort) {
					t.Errorf("%s: --admin-port %q, but Service %s sends the admin API to %d", what, v, adminSvc, adminPort)
				}
				if v, _ := argValue(c.Args, "allow-client-shm"); v == "true" {
					if !pod.HostIPC {
						t.Errorf("%s: --allow-client-shm true without hostIPC: clients and executors would not share /dev/shm", what)
					}
					// A client's regions are on its node: it must reach the
					// gateway there, whichever replica the Service picks.
					if m.Kind != "DaemonSet" {
						t.Errorf("%s: --allow-client-shm true in a %s: a client's registration can land on another node's gateway", what, m.Kind)
					}
					for _, svc := range docs {
						if svc.Kind == "Service" && svc.Metadata.Name == m.Metadata.Name && svc.Spec.InternalTrafficPolicy != "Local" {
							t.Errorf("%s: --allow-client-shm true but Service %s routes to every node (internalTrafficPolicy %q)", what, svc.Metadata.Name, svc.Spec.InternalTrafficPolicy)
						}
					}
				}
			case "executor":
				wantDevShm(t, what, pod, c)
				wantNode(t, what, pod, c)
				if adminSvc != "" {
					wantDrain(t, what, c, adminSvc+":"+strconv.Itoa(adminPort))
				}
				repo, _ := argValue(c.Args, "model-repository")
				for _, vm := range c.VolumeMounts {
					if vm.Name == "models" && (vm.MountPath != repo || !vm.ReadOnly) {
						t.Errorf("%s: models mounted at %s (read-only %v), --model-repository %s", what, vm.MountPath, vm.ReadOnly, repo)
					}
				}
				// Probes: a rollout waits for the models to load, a hung
				// executor is restarted.
				wantProbePort(t, what, c)
				wantProbe(t, what, c.LivenessProbe, "/livez")
				wantProbe(t, what, c.ReadinessProbe, "/readyz")
				wantProbe(t, what, c.StartupProbe, "/readyz")
				if p := c.StartupProbe; p != nil && p.PeriodSeconds*max(p.FailureThreshold, 1) < 300 {
					t.Errorf("%s: the startup probe gives a model %ds to load, want at least 300s", what, p.PeriodSeconds*max(p.FailureThreshold, 1))
				}
				if m.Spec.MinReadySeconds <= 0 {
					t.Errorf("%s: no minReadySeconds", what)
				}
				wantWritableTmp(t, what, pod, c)
				if m.Kind == "DaemonSet" {
					if _, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok || len(pod.NodeSelector) == 0 {
						t.Errorf("%s: a GPU executor without nvidia.com/gpu limits or a nodeSelector", what)
					}
				}
			case "shm-registry", "sequence-router":
				wantProbePort(t, what, c)
				wantProbe(t, what, c.LivenessProbe, "/livez")
				wantProbe(t, what, c.ReadinessProbe, "/readyz")
				if svc == "sequence-router" && (m.Spec.Replicas == nil || *m.Spec.Replicas < 2) {
					t.Errorf("%s: one sequence-router: no failover", what)
				}
			}
		}
	}
	for _, svc := range []string{"gateway", "executor", "shm-registry", "sequence-router"} {
		if !seen[svc] {
			t.Errorf("%s: no %s workload", file, svc)
		}
	}
}

// nereidService reads the SERVICE of an image named <repo>-<service>:<tag>.
func nereidService(image string) (string, bool) {
	name := path.Base(image)
	name, _, _ = strings.Cut(name, ":")
	for _, svc := range []string{"gateway", "executor", "shm-registry", "sequence-router"} {
		if strings.HasSuffix(name, "-"+svc) {
			return svc, true
		}
	}
	return "", false
}

// expandEnv replaces $(VAR) in args as the kubelet does, after checking the
// container defines VAR.
func expandEnv(t *testing.T, what string, c container) []string {
	defined := map[string]bool{}
	for _, e := range c.Env {
		defined[e.Name] = true
	}
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		for {
			start := strings.Index(a, "$(")
			if start < 0 {
				break
			}
			end := strings.Index(a[start:], ")")
			if end < 0 {
				break
			}
			name := a[start+2 : start+end]
			if !defined[name] {
				t.Errorf("%s: arg %q uses $(%s), which the container does not define", what, c.Args[i], name)
			}
			a = a[:start] + "value" + a[start+end+1:]
		}
		out[i] = a
	}
	return out
}

// wantDrain: with the admin API on, an executor is named after its pod and
// drains itself through the gateways' admin Service (addr) before it
// stops, with a nereidctl command line nereidctl accepts.
func wantDrain(t *testing.T, what string, c container, addr string) {
	t.Helper()
	if v, _ := argValue(c.Args, "id"); v != "$(NEREID_EXECUTOR_ID)" {
		t.Errorf("%s: --id %q, want $(NEREID_EXECUTOR_ID) (the pod's name, which the preStop drain names)", what, v)
	}
	fromPod := false
	for _, e := range c.Env {
		if e.Name == "NEREID_EXECUTOR_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			fromPod = true
		}
	}
	if !fromPod {
		t.Errorf("%s: NEREID_EXECUTOR_ID does not come from metadata.name", what)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Errorf("%s: no preStop drain", what)
		return
	}
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) < 2 || cmd[0] != "/usr/local/bin/nereidctl" || cmd[len(cmd)-1] != "drain" {
		t.Errorf("%s: preStop %q, want /usr/local/bin/nereidctl [flags] drain", what, cmd)
		return
	}
	checkArgs(t, what+" preStop", "nereidctl", cmd[1:len(cmd)-1])
	if v, _ := argValue(cmd, "addr"); v != addr {
		t.Errorf("%s: preStop drains through %q, want the admin Service %s", what, v, addr)
	}
}

// wantProbePort: --probe-addr listens on the container's port named probe.
func wantProbePort(t *testing.T, what string, c container) {
	t.Helper()
	addr, ok := argValue(c.Args, "probe-addr")
	if !ok {
		t.Errorf("%s: no --probe-addr", what)
		return
	}
	var port int
	for _, p := range c.Ports {
		if p.Name == "probe" {
			port = p.ContainerPort
		}
	}
	if !strings.HasSuffix(addr, ":"+strconv.Itoa(port)) {
		t.Errorf("%s: --probe-addr %s but the probe port is %d", what, addr, port)
	}
}

// wantWritableTmp: with a read-only root filesystem, /tmp (where models
// loaded with files in the request are written) is a size-limited emptyDir.
func wantWritableTmp(t *testing.T, what string, pod podSpec, c container) {
	t.Helper()
	var vol string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == "/tmp" && !vm.ReadOnly {
			vol = vm.Name
		}
	}
	for _, v := range pod.Volumes {
		if v.Name == vol && v.EmptyDir != nil && v.EmptyDir.SizeLimit != "" {
			return
		}
	}
	t.Errorf("%s: no writable, size-limited /tmp", what)
}

func wantProbe(t *testing.T, what string, p *probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
		t.Errorf("%s: want an HTTP probe of %s", what, path)
	}
}

// wantDevShm: gateway and executor pods either share the node's IPC
// namespace (and /dev/shm) or get an in-memory /dev/shm with a size limit.
func wantDevShm(t *testing.T, what string, pod podSpec, c container) {
	t.Helper()
	if pod.HostIPC {
		return
	}
	var vol string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == "/dev/shm" {
			vol = vm.Name
		}
	}
	for _, v := range pod.Volumes {
		if v.Name == vol && v.EmptyDir != nil && v.EmptyDir.Medium == "Memory" && v.EmptyDir.SizeLimit != "" {
			return
		}
	}
	t.Errorf("%s: no hostIPC and no in-memory, size-limited /dev/shm", what)
}

// wantNode: pods sharing the node's /dev/shm (hostIPC) report the node's
// name, so that gateways and executors of one node recognise each other.
func wantNode(t *testing.T, what string, pod podSpec, c container) {
	t.Helper()
	if !pod.HostIPC {
		return
	}
	if v, _ := argValue(c.Args, "node"); v != "$(NODE_NAME)" {
		t.Errorf("%s: hostIPC but --node %q, want $(NODE_NAME)", what, v)
	}
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			return
		}
	}
	t.Errorf("%s: NODE_NAME does not come from spec.nodeName", what)
}

// TestChartSecurityFiles keeps the chart's copies of the NATS authorization
// and the Redis ACL template equal to the ones compose and the tests use
// (the chart can only read files inside itself).
func TestChartSecurityFiles(t *testing.T) {
	for chart, shipped := range map[string]string{
		"charts/nereid/files/nats-auth.conf": "deploy/docker/nats-auth.conf",
		"charts/nereid/files/users.acl.in":   "deploy/redis/users.acl.in",
	} {
		a, err1 := os.ReadFile(filepath.Join(repoRoot, chart))
		b, err2 := os.ReadFile(filepath.Join(repoRoot, shipped))
		if err1 != nil || err2 != nil {
			t.Fatalf("%v %v", err1, err2)
		}
		if string(a) != string(b) {
			t.Errorf("%s differs from %s: copy it over", chart, shipped)
		}
	}
}
