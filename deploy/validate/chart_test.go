package validate

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
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
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		// A Secret's or a ConfigMap's
		Type string            `yaml:"type"`
		Data map[string]string `yaml:"data"`
		Spec struct {
			Replicas        *int `yaml:"replicas"`
			MinReadySeconds int  `yaml:"minReadySeconds"`
			// A workload's or a PodDisruptionBudget's (a Service's, a
			// plain map, decodes to an empty one)
			Selector labelSelector `yaml:"selector"`
			// A Service's
			InternalTrafficPolicy string `yaml:"internalTrafficPolicy"`
			Template              struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
			Ports []struct {
				Name string `yaml:"name"`
				Port int    `yaml:"port"`
			} `yaml:"ports"` // a Service's
			// A NetworkPolicy's
			PodSelector labelSelector `yaml:"podSelector"`
			PolicyTypes []string      `yaml:"policyTypes"`
			Ingress     []struct {
				Ports []struct {
					Port any `yaml:"port"`
				} `yaml:"ports"`
				From []policyPeer `yaml:"from"`
			} `yaml:"ingress"`
			// A PodDisruptionBudget's
			MaxUnavailable any `yaml:"maxUnavailable"`
			MinAvailable   any `yaml:"minAvailable"`
			// A KEDA ScaledObject's
			ScaleTargetRef struct {
				Name string `yaml:"name"`
			} `yaml:"scaleTargetRef"`
			MinReplicaCount int `yaml:"minReplicaCount"`
			MaxReplicaCount int `yaml:"maxReplicaCount"`
			Triggers        []struct {
				Type     string            `yaml:"type"`
				Metadata map[string]string `yaml:"metadata"`
			} `yaml:"triggers"`
		} `yaml:"spec"`
	}
	labelSelector struct {
		MatchLabels      map[string]string `yaml:"matchLabels"`
		MatchExpressions []struct {
			Key      string   `yaml:"key"`
			Operator string   `yaml:"operator"`
			Values   []string `yaml:"values"`
		} `yaml:"matchExpressions"`
	}
	policyPeer struct {
		PodSelector       *labelSelector `yaml:"podSelector"`
		NamespaceSelector *labelSelector `yaml:"namespaceSelector"`
		IPBlock           any            `yaml:"ipBlock"`
	}
	podSpec struct {
		HostIPC                   bool              `yaml:"hostIPC"`
		NodeSelector              map[string]string `yaml:"nodeSelector"`
		RuntimeClassName          string            `yaml:"runtimeClassName"`
		PriorityClassName         string            `yaml:"priorityClassName"`
		TopologySpreadConstraints []struct {
			MaxSkew           int           `yaml:"maxSkew"`
			TopologyKey       string        `yaml:"topologyKey"`
			WhenUnsatisfiable string        `yaml:"whenUnsatisfiable"`
			LabelSelector     labelSelector `yaml:"labelSelector"`
		} `yaml:"topologySpreadConstraints"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
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
			Value     string `yaml:"value"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
				SecretKeyRef *struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
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

// checkScaling checks the placement and autoscaling objects: executors
// under --placement only beside a sequence router running the controller
// (and the other way round); every KEDA ScaledObject targets an executor
// Deployment that leaves its replica count to it, with a Prometheus
// trigger on the pending requests.
func checkScaling(t *testing.T, file string, docs []manifest) {
	placedExec, placedRouter := false, false
	deployments := map[string]manifest{}
	for _, m := range docs {
		if m.Kind == "Deployment" {
			deployments[m.Metadata.Name] = m
		}
		if m.Kind != "Deployment" && m.Kind != "DaemonSet" {
			continue
		}
		for _, c := range m.Spec.Template.Spec.Containers {
			svc, _ := nereidService(c.Image)
			if !slices.Contains(c.Args, "--placement=true") {
				continue
			}
			switch svc {
			case "executor":
				placedExec = true
			case "sequence-router":
				placedRouter = true
			default:
				t.Errorf("%s: %s/%s runs %s with --placement", file, m.Kind, m.Metadata.Name, svc)
			}
		}
	}
	if placedExec != placedRouter {
		t.Errorf("%s: executors under --placement %v, but a sequence router running the placement controller %v", file, placedExec, placedRouter)
	}
	for _, m := range docs {
		if m.Kind != "ScaledObject" {
			continue
		}
		what := file + " ScaledObject/" + m.Metadata.Name
		d, ok := deployments[m.Spec.ScaleTargetRef.Name]
		if !ok {
			t.Errorf("%s: targets %q, which is no Deployment of the chart", what, m.Spec.ScaleTargetRef.Name)
			continue
		}
		if svc, _ := nereidService(d.Spec.Template.Spec.Containers[0].Image); svc != "executor" {
			t.Errorf("%s: targets the %s Deployment %s", what, svc, d.Metadata.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("%s: Deployment %s sets replicas %d, which KEDA would be fought over on every upgrade", what, d.Metadata.Name, *d.Spec.Replicas)
		}
		if m.Spec.MaxReplicaCount < max(m.Spec.MinReplicaCount, 1) {
			t.Errorf("%s: replicas %d to %d", what, m.Spec.MinReplicaCount, m.Spec.MaxReplicaCount)
		}
		if len(m.Spec.Triggers) != 1 || m.Spec.Triggers[0].Type != "prometheus" ||
			!strings.Contains(m.Spec.Triggers[0].Metadata["query"], "nv_inference_pending_request_count") || m.Spec.Triggers[0].Metadata["threshold"] == "" {
			t.Errorf("%s: triggers %+v, want one prometheus trigger on nv_inference_pending_request_count with a threshold", what, m.Spec.Triggers)
		}
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

	checkScaling(t, file, docs)

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

	r := newRendered(t, file, docs)
	checkCredentials(t, r)
	checkNetworkPolicies(t, r)
	checkDisruption(t, r)
	checkExecutorPools(t, r)
	checkPodClasses(t, r)
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

// rendered is one rendered file with the values it was rendered from:
// charts/nereid/values.yaml under ci/<name>-values.yaml for <name>.yaml
// (default.yaml: the defaults alone), as make helm-lint names them.
type rendered struct {
	file      string
	docs      []manifest
	values    map[string]any
	prefix    string // <release>-nereid, or the release when it is called nereid
	workloads []workload
}

// workload is a Deployment's or DaemonSet's pod.
type workload struct {
	m         manifest
	what      string
	component string // app.kubernetes.io/component
	labels    map[string]string
	pod       podSpec
}

func newRendered(t *testing.T, file string, docs []manifest) *rendered {
	t.Helper()
	r := &rendered{file: file, docs: docs, values: loadValues(t, filepath.Join(repoRoot, "charts/nereid/values.yaml"))}
	if name := strings.TrimSuffix(path.Base(file), ".yaml"); name != "default" {
		mergeValues(r.values, loadValues(t, filepath.Join(repoRoot, "charts/nereid/ci", name+"-values.yaml")))
	}
	for _, m := range docs {
		if m.Kind == "Service" && strings.HasSuffix(m.Metadata.Name, "-gateway") {
			r.prefix = strings.TrimSuffix(m.Metadata.Name, "-gateway")
		}
		if m.Kind == "Deployment" || m.Kind == "DaemonSet" {
			labels := m.Spec.Template.Metadata.Labels
			r.workloads = append(r.workloads, workload{
				m: m, what: file + " " + m.Kind + "/" + m.Metadata.Name,
				component: labels["app.kubernetes.io/component"], labels: labels, pod: m.Spec.Template.Spec,
			})
		}
	}
	if r.prefix == "" {
		t.Fatalf("%s: no gateway Service", file)
	}
	return r
}

func loadValues(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("values of %s: %v", file, err)
	}
	v := map[string]any{}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v
}

// mergeValues overlays src on dst as helm does: maps merge, a null deletes.
func mergeValues(dst, src map[string]any) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, ok1 := v.(map[string]any)
		dm, ok2 := dst[k].(map[string]any)
		if ok1 && ok2 {
			mergeValues(dm, sm)
			continue
		}
		dst[k] = v
	}
}

// value reads a nested value (nil when absent).
func value(v map[string]any, keys ...string) any {
	var cur any = v
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func str(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// role is the Nereid role of a component label (executor-<pool> is executor).
func role(component string) string {
	if strings.HasPrefix(component, "executor-") {
		return "executor"
	}
	return component
}

func (s labelSelector) matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		got, ok := labels[e.Key]
		switch e.Operator {
		case "In":
			if !ok || !slices.Contains(e.Values, got) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(e.Values, got) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func (s labelSelector) empty() bool { return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 }

func envOf(c container, name string) (value string, secret, key string, ok bool) {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return "", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, true
		}
		return e.Value, "", "", true
	}
	return "", "", "", false
}

func (r *rendered) find(kind, name string) *manifest {
	for i := range r.docs {
		if r.docs[i].Kind == kind && r.docs[i].Metadata.Name == name {
			return &r.docs[i]
		}
	}
	return nil
}

// roleEnvName: gateway -> GATEWAY, sequence-router -> SEQUENCE_ROUTER.
func roleEnvName(role string) string {
	return strings.ToUpper(strings.ReplaceAll(role, "-", "_"))
}

// checkCredentials: the in-chart NATS and Redis authenticate every role
// (with the Secrets named in values, or ones the chart generates), NATS
// with one user per role and its permissions, Redis with ACL users, and
// every service presents its role's password from that Secret.
func checkCredentials(t *testing.T, r *rendered) {
	generate, _ := value(r.values, "security", "generateCredentials").(bool)
	secretFor := func(store string) (name string, generated bool) {
		if s := str(value(r.values, "security", store, "existingSecret")); s != "" {
			return s, false
		}
		if str(value(r.values, store, "url")) == "" && generate {
			return r.prefix + "-" + store + "-credentials", true
		}
		return "", false
	}
	stores := []struct {
		store string
		roles []string
	}{
		{"nats", []string{"gateway", "executor", "sequence-router", "shm-registry"}},
		{"redis", []string{"sequence-router", "shm-registry", "executor"}},
	}
	for _, st := range stores {
		secret, generated := secretFor(st.store)
		inChart := str(value(r.values, st.store, "url")) == ""
		if path.Base(r.file) == "default.yaml" && secret == "" {
			t.Errorf("%s: the default install runs %s without authentication", r.file, st.store)
		}
		gen := r.find("Secret", r.prefix+"-"+st.store+"-credentials")
		switch {
		case generated && gen == nil:
			t.Errorf("%s: no generated Secret %s-%s-credentials for the in-chart %s", r.file, r.prefix, st.store, st.store)
		case !generated && gen != nil:
			t.Errorf("%s: Secret %s generated though %s credentials come from elsewhere (or there is no in-chart %s)", r.file, gen.Metadata.Name, st.store, st.store)
		case generated:
			for _, role := range st.roles {
				pw, err := base64.StdEncoding.DecodeString(gen.Data[role])
				if err != nil || len(pw) < 16 {
					t.Errorf("%s: Secret %s: key %s is not a random password (%d bytes, %v)", r.file, gen.Metadata.Name, role, len(pw), err)
				}
			}
		}

		upper := strings.ToUpper(st.store)
		for _, w := range r.workloads {
			for _, c := range w.pod.Containers {
				svc, ok := nereidService(c.Image)
				if !ok {
					continue
				}
				uses := slices.Contains(st.roles, svc)
				user, _, _, hasUser := envOf(c, "NEREID_"+upper+"_USER")
				_, s, k, hasPw := envOf(c, "NEREID_"+upper+"_PASSWORD")
				switch {
				case !uses || secret == "":
					if hasUser || hasPw {
						t.Errorf("%s: %s credentials set (%s has none for this role)", w.what, st.store, st.store)
					}
				case user != svc || s != secret || k != svc:
					t.Errorf("%s: %s user %q, password from Secret %q key %q; want user %s, password from %s key %s", w.what, st.store, user, s, k, svc, secret, svc)
				}
			}
			if !inChart || w.component != st.store {
				continue
			}
			// The in-chart server: the passwords it checks.
			for _, c := range w.pod.Containers {
				for _, role := range st.roles {
					_, s, k, ok := envOf(c, "NEREID_"+upper+"_"+roleEnvName(role)+"_PASSWORD")
					if secret != "" && (!ok || s != secret || k != role) {
						t.Errorf("%s: the %s role's password is not read from Secret %s key %s (from %q key %q)", w.what, role, secret, role, s, k)
					}
				}
				if st.store == "redis" && secret != "" && !slices.Contains(c.Args, "--aclfile") {
					t.Errorf("%s: Redis without --aclfile: no ACL users", w.what)
				}
			}
		}
		if !inChart || secret == "" {
			continue
		}
		// What the in-chart server enforces: compose's files.
		switch st.store {
		case "nats":
			cm := r.find("ConfigMap", r.prefix+"-nats")
			if cm == nil {
				t.Errorf("%s: no NATS ConfigMap %s-nats", r.file, r.prefix)
				continue
			}
			if !strings.Contains(cm.Data["nats.conf"], `include "nats-auth.conf"`) {
				t.Errorf("%s: nats.conf does not include nats-auth.conf: NATS without authorization", r.file)
			}
			auth := cm.Data["nats-auth.conf"]
			want, err := os.ReadFile(filepath.Join(repoRoot, "deploy/docker/nats-auth.conf"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(auth) != strings.TrimSpace(string(want)) {
				t.Errorf("%s: the NATS authorization differs from deploy/docker/nats-auth.conf", r.file)
			}
			if !strings.Contains(auth, "authorization {") {
				t.Errorf("%s: nats-auth.conf has no authorization block", r.file)
			}
			for _, role := range st.roles {
				if !strings.Contains(auth, `user: "`+role+`"`) || !strings.Contains(auth, "password: $NEREID_NATS_"+roleEnvName(role)+"_PASSWORD") {
					t.Errorf("%s: NATS has no user %s with its password variable", r.file, role)
				}
			}
			if n := strings.Count(auth, "permissions: {"); n != len(st.roles) {
				t.Errorf("%s: %d NATS users with permissions, want %d", r.file, n, len(st.roles))
			}
		case "redis":
			cm := r.find("ConfigMap", r.prefix+"-redis-acl")
			if cm == nil {
				t.Errorf("%s: no Redis ACL ConfigMap %s-redis-acl", r.file, r.prefix)
				continue
			}
			want, err := os.ReadFile(filepath.Join(repoRoot, "deploy/redis/users.acl.in"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(cm.Data["users.acl.in"]) != strings.TrimSpace(string(want)) {
				t.Errorf("%s: the Redis ACL differs from deploy/redis/users.acl.in", r.file)
			}
		}
	}
}

// checkNetworkPolicies: with networkPolicy.enabled every pod of the release
// is selected (ingress denied but for what policies allow), NATS is reachable
// from Nereid pods only, Redis from the routers, registries and executors
// only, the gateways' HTTP and gRPC from networkPolicy.gateway.from, and
// executors, routers and registries on their probe and metrics ports only.
func checkNetworkPolicies(t *testing.T, r *rendered) {
	var policies []manifest
	for _, m := range r.docs {
		if m.Kind == "NetworkPolicy" {
			policies = append(policies, m)
		}
	}
	if on, _ := value(r.values, "networkPolicy", "enabled").(bool); !on {
		if len(policies) != 0 {
			t.Errorf("%s: NetworkPolicies with networkPolicy.enabled false", r.file)
		}
		return
	}
	if path.Base(r.file) == "default.yaml" && len(policies) == 0 {
		t.Errorf("%s: the default install has no NetworkPolicy", r.file)
	}
	release := ""
	for _, w := range r.workloads {
		release = w.labels["app.kubernetes.io/instance"]
	}
	denyAll := false
	for _, p := range policies {
		what := r.file + " NetworkPolicy/" + p.Metadata.Name
		if p.Spec.PodSelector.MatchLabels["app.kubernetes.io/instance"] != release {
			t.Errorf("%s: selects pods beyond the release (podSelector %v)", what, p.Spec.PodSelector)
		}
		if !slices.Contains(p.Spec.PolicyTypes, "Ingress") {
			t.Errorf("%s: policyTypes %v without Ingress", what, p.Spec.PolicyTypes)
		}
		all := true
		for _, w := range r.workloads {
			all = all && p.Spec.PodSelector.matches(w.labels)
		}
		if all && len(p.Spec.Ingress) == 0 {
			denyAll = true
		}
	}
	if !denyAll {
		t.Errorf("%s: no NetworkPolicy denying ingress to every pod of the release", r.file)
	}

	podsOf := func(pred func(workload) bool) []workload {
		var out []workload
		for _, w := range r.workloads {
			if pred(w) {
				out = append(out, w)
			}
		}
		return out
	}
	nereid := podsOf(func(w workload) bool { _, ok := nereidService(w.pod.Containers[0].Image); return ok })
	for _, w := range r.workloads {
		// port name -> the peers of each rule allowing it (nil: anywhere)
		allowed := map[string][][]policyPeer{}
		selected := false
		for _, p := range policies {
			if !p.Spec.PodSelector.matches(w.labels) {
				continue
			}
			selected = true
			for _, rule := range p.Spec.Ingress {
				if len(rule.Ports) == 0 {
					t.Errorf("%s: a rule of NetworkPolicy/%s allows every port", w.what, p.Metadata.Name)
				}
				for _, port := range rule.Ports {
					name := portName(w.pod, port.Port)
					allowed[name] = append(allowed[name], rule.From)
				}
			}
		}
		if !selected {
			t.Errorf("%s: no NetworkPolicy selects it", w.what)
			continue
		}
		if _, ok := allowed["metrics"]; !ok && w.component != "nats" && w.component != "redis" {
			t.Errorf("%s: the metrics port is not allowed", w.what)
		}
		// onlyFrom: every rule allowing port names peers, all of them pods
		// of the release matched by want and none matched by unwanted, and
		// every want pod is matched.
		onlyFrom := func(port string, want, unwanted []workload) {
			rules, ok := allowed[port]
			if !ok {
				t.Errorf("%s: port %s not allowed", w.what, port)
				return
			}
			reached := map[string]bool{}
			for _, peers := range rules {
				if len(peers) == 0 {
					t.Errorf("%s: port %s open to anyone", w.what, port)
				}
				for _, peer := range peers {
					if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil ||
						peer.PodSelector.MatchLabels["app.kubernetes.io/instance"] != release {
						t.Errorf("%s: port %s allowed from %+v, beyond the release's pods", w.what, port, peer)
						continue
					}
					for _, u := range unwanted {
						if peer.PodSelector.matches(u.labels) {
							t.Errorf("%s: port %s allowed from %s", w.what, port, u.what)
						}
					}
					for _, x := range want {
						if peer.PodSelector.matches(x.labels) {
							reached[x.what] = true
						}
					}
				}
			}
			for _, x := range want {
				if !reached[x.what] {
					t.Errorf("%s: %s cannot reach port %s", w.what, x.what, port)
				}
			}
		}
		switch role(w.component) {
		case "nats":
			onlyFrom("client", nereid, nil)
		case "redis":
			onlyFrom("redis",
				podsOf(func(x workload) bool {
					return slices.Contains([]string{"executor", "sequence-router", "shm-registry"}, role(x.component))
				}),
				podsOf(func(x workload) bool { return x.component == "gateway" }))
		case "executor", "sequence-router", "shm-registry":
			for port := range allowed {
				if port != "probe" && port != "metrics" {
					t.Errorf("%s: port %s allowed; only probe and metrics should be", w.what, port)
				}
			}
		case "gateway":
			from, _ := value(r.values, "networkPolicy", "gateway", "from").([]any)
			for _, port := range []string{"http", "grpc"} {
				rules, ok := allowed[port]
				if !ok {
					t.Errorf("%s: port %s not allowed", w.what, port)
				}
				for _, peers := range rules {
					if len(from) > 0 && len(peers) == 0 {
						t.Errorf("%s: port %s open to anyone, though networkPolicy.gateway.from is set", w.what, port)
					}
					if len(from) == 0 && len(peers) != 0 {
						t.Errorf("%s: port %s allowed from %v only, though networkPolicy.gateway.from is empty", w.what, port, peers)
					}
				}
			}
			for _, port := range []string{"admin", "admin-http"} {
				for _, peers := range allowed[port] {
					if len(peers) == 0 {
						t.Errorf("%s: the admin API (%s) is open to anyone", w.what, port)
					}
				}
			}
			if on, _ := value(r.values, "gateway", "admin", "enabled").(bool); on {
				for _, x := range podsOf(func(x workload) bool { return role(x.component) == "executor" }) {
					reached := false
					for _, peers := range allowed["admin"] {
						for _, peer := range peers {
							reached = reached || (peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.PodSelector.matches(x.labels))
						}
					}
					if !reached {
						t.Errorf("%s: %s cannot reach the admin API to drain", w.what, x.what)
					}
				}
			}
		}
	}
}

// portName names a NetworkPolicy port (a name, or a number the pod's
// containers name).
func portName(pod podSpec, port any) string {
	switch p := port.(type) {
	case string:
		return p
	case int:
		for _, c := range pod.Containers {
			for _, cp := range c.Ports {
				if cp.ContainerPort == p {
					return cp.Name
				}
			}
		}
		return strconv.Itoa(p)
	}
	return fmt.Sprint(port)
}

// checkDisruption: gateway and sequence-router Deployments spread over
// nodes (a topology spread constraint selecting their own pods) and, with
// more than one replica, a PodDisruptionBudget limits voluntary evictions.
func checkDisruption(t *testing.T, r *rendered) {
	var pdbs []manifest
	for _, m := range r.docs {
		if m.Kind == "PodDisruptionBudget" {
			pdbs = append(pdbs, m)
		}
	}
	for _, p := range pdbs {
		n := 0
		for _, w := range r.workloads {
			if p.Spec.Selector.matches(w.labels) {
				n++
			}
		}
		if p.Spec.Selector.empty() || n != 1 {
			t.Errorf("%s: PodDisruptionBudget/%s selects %d workloads, want 1", r.file, p.Metadata.Name, n)
		}
		if (p.Spec.MaxUnavailable == nil) == (p.Spec.MinAvailable == nil) {
			t.Errorf("%s: PodDisruptionBudget/%s: want one of maxUnavailable and minAvailable", r.file, p.Metadata.Name)
		}
	}
	for _, w := range r.workloads {
		var vals string
		switch w.component {
		case "gateway":
			vals = "gateway"
		case "sequence-router":
			vals = "sequenceRouter"
		default:
			continue
		}
		if w.m.Kind != "Deployment" {
			continue
		}
		if on, _ := value(r.values, vals, "podDisruptionBudget", "enabled").(bool); on && w.m.Spec.Replicas != nil && *w.m.Spec.Replicas > 1 {
			found := false
			for _, p := range pdbs {
				found = found || p.Spec.Selector.matches(w.labels)
			}
			if !found {
				t.Errorf("%s: %d replicas and no PodDisruptionBudget", w.what, *w.m.Spec.Replicas)
			}
		}
		if on, _ := value(r.values, vals, "topologySpread", "enabled").(bool); on {
			key := str(value(r.values, vals, "topologySpread", "topologyKey"))
			found := false
			for _, c := range w.pod.TopologySpreadConstraints {
				if c.TopologyKey == key && c.MaxSkew >= 1 && c.LabelSelector.matches(w.labels) && !c.LabelSelector.empty() &&
					(c.WhenUnsatisfiable == "ScheduleAnyway" || c.WhenUnsatisfiable == "DoNotSchedule") {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no topology spread over %s selecting its pods (%+v)", w.what, key, w.pod.TopologySpreadConstraints)
			}
		}
	}
}

// executorPool is what values ask of one executor workload.
type executorPool struct {
	component, kind   string
	gpus              int
	resourceName      string
	runtime, priority string
}

func toInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	case string:
		i, _ := strconv.Atoi(n)
		return i
	}
	return 0
}

// firstSet: the first non-empty string among vs.
func firstSet(vs ...any) string {
	for _, v := range vs {
		if s := str(v); s != "" {
			return s
		}
	}
	return ""
}

func expectedPools(v map[string]any) []executorPool {
	e, _ := value(v, "executor").(map[string]any)
	res := firstSet(value(e, "gpu", "resourceName"), "nvidia.com/gpu")
	var pools []executorPool
	if on, _ := value(e, "gpu", "enabled").(bool); on {
		pools = append(pools, executorPool{"executor-gpu", "DaemonSet", toInt(value(e, "gpu", "gpusPerNode")), res,
			firstSet(value(e, "gpu", "runtimeClassName"), e["runtimeClassName"], v["runtimeClassName"]),
			firstSet(value(e, "gpu", "priorityClassName"), e["priorityClassName"], v["priorityClassName"])})
	}
	if on, _ := value(e, "cpu", "enabled").(bool); on {
		pools = append(pools, executorPool{"executor-cpu", "Deployment", 0, "",
			firstSet(value(e, "cpu", "runtimeClassName"), e["runtimeClassName"], v["runtimeClassName"]),
			firstSet(value(e, "cpu", "priorityClassName"), e["priorityClassName"], v["priorityClassName"])})
	}
	nps, _ := e["nodePools"].([]any)
	for _, x := range nps {
		np, _ := x.(map[string]any)
		gpus := toInt(value(e, "gpu", "gpusPerNode"))
		if g, ok := np["gpusPerNode"]; ok {
			gpus = toInt(g)
		}
		pools = append(pools, executorPool{"executor-" + str(np["name"]), firstSet(np["kind"], "DaemonSet"), gpus,
			firstSet(np["gpuResourceName"], res),
			firstSet(np["runtimeClassName"], e["runtimeClassName"], v["runtimeClassName"]),
			firstSet(np["priorityClassName"], e["priorityClassName"], v["priorityClassName"])})
	}
	return pools
}

// checkExecutorPools: one executor workload per pool values ask for
// (executor.gpu, executor.cpu, executor.nodePools), each limited to the
// GPUs of the resource name values give, with its pod classes.
func checkExecutorPools(t *testing.T, r *rendered) {
	want := expectedPools(r.values)
	got := map[string]workload{}
	for _, w := range r.workloads {
		if role(w.component) == "executor" {
			got[w.component] = w
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d executor workloads, values ask for %d", r.file, len(got), len(want))
	}
	for _, p := range want {
		w, ok := got[p.component]
		if !ok {
			t.Errorf("%s: no executor workload %s", r.file, p.component)
			continue
		}
		if w.m.Kind != p.kind {
			t.Errorf("%s: a %s, want %s", w.what, w.m.Kind, p.kind)
		}
		for _, c := range w.pod.Containers {
			if p.gpus > 0 {
				if n, ok := c.Resources.Limits[p.resourceName]; !ok || toInt(n) != p.gpus {
					t.Errorf("%s: limits %v, want %d %s", w.what, c.Resources.Limits, p.gpus, p.resourceName)
				}
				if p.kind == "DaemonSet" && len(w.pod.NodeSelector) == 0 {
					t.Errorf("%s: a GPU executor DaemonSet without a nodeSelector", w.what)
				}
			} else {
				for name := range c.Resources.Limits {
					if strings.Contains(name, "gpu") {
						t.Errorf("%s: limits ask for %s, values for no GPU", w.what, name)
					}
				}
			}
		}
		if w.pod.RuntimeClassName != p.runtime || w.pod.PriorityClassName != p.priority {
			t.Errorf("%s: runtimeClassName %q, priorityClassName %q; want %q, %q", w.what, w.pod.RuntimeClassName, w.pod.PriorityClassName, p.runtime, p.priority)
		}
	}
}

// checkPodClasses: gateways, routers, registries, NATS and Redis run with
// the runtime and priority classes their values (or the global ones) give.
func checkPodClasses(t *testing.T, r *rendered) {
	for _, w := range r.workloads {
		var vals string
		switch w.component {
		case "gateway":
			vals = "gateway"
		case "sequence-router":
			vals = "sequenceRouter"
		case "shm-registry":
			vals = "shmRegistry"
		case "nats", "redis":
		default:
			continue
		}
		rc := firstSet(value(r.values, vals, "runtimeClassName"), r.values["runtimeClassName"])
		pc := firstSet(value(r.values, vals, "priorityClassName"), r.values["priorityClassName"])
		if vals == "" {
			rc, pc = str(r.values["runtimeClassName"]), str(r.values["priorityClassName"])
		}
		if w.pod.RuntimeClassName != rc || w.pod.PriorityClassName != pc {
			t.Errorf("%s: runtimeClassName %q, priorityClassName %q; want %q, %q", w.what, w.pod.RuntimeClassName, w.pod.PriorityClassName, rc, pc)
		}
	}
}
