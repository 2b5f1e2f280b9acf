{{/* Names: <release>-nereid unless the release is already called nereid. */}}
{{- define "nereid.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A component's resource name, e.g. "nereid-gateway". Call with (list $ "gateway"). */}}
{{- define "nereid.name" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "nereid.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of a component. Call with (list $ "gateway"). */}}
{{- define "nereid.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* All labels of a component. Call with (list $ "gateway"). */}}
{{- define "nereid.labels" -}}
{{- $root := index . 0 -}}
{{ include "nereid.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A Nereid image: <repository>-<service>:<tag>. Call with (list $ "gateway"). */}}
{{- define "nereid.image" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s:%s" $root.Values.image.repository (index . 1) (default $root.Chart.AppVersion $root.Values.image.tag) -}}
{{- end -}}

{{- define "nereid.natsURL" -}}
{{- default (printf "nats://%s:4222" (include "nereid.name" (list . "nats"))) .Values.nats.url -}}
{{- end -}}

{{- define "nereid.redisURL" -}}
{{- default (printf "redis://%s:6379/0" (include "nereid.name" (list . "redis"))) .Values.redis.url -}}
{{- end -}}

{{/*
runtimeClassName and priorityClassName of a pod: the global values, each
overridden by the first of the given value maps (most specific first) that
sets it. Call with (list $ <values>...).
*/}}
{{- define "nereid.podClasses" -}}
{{- $root := index . 0 -}}
{{- $rc := $root.Values.runtimeClassName -}}
{{- $pc := $root.Values.priorityClassName -}}
{{- $rcSet := false -}}
{{- $pcSet := false -}}
{{- range $v := rest . }}
{{- if and (kindIs "map" $v) (not $rcSet) (index $v "runtimeClassName") }}
{{- $rc = index $v "runtimeClassName" }}
{{- $rcSet = true }}
{{- end }}
{{- if and (kindIs "map" $v) (not $pcSet) (index $v "priorityClassName") }}
{{- $pc = index $v "priorityClassName" }}
{{- $pcSet = true }}
{{- end }}
{{- end }}
{{- with $rc }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $pc }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/*
Spread a Deployment's pods over topology domains (nodes by default),
preferred rather than required. Call with (list $ "<component>" <values>),
<values> holding topologySpread.
*/}}
{{- define "nereid.topologySpread" -}}
{{- $root := index . 0 -}}
{{- $ts := index (index . 2) "topologySpread" | default dict -}}
{{- if $ts.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ $ts.maxSkew | default 1 }}
    topologyKey: {{ $ts.topologyKey | default "kubernetes.io/hostname" }}
    whenUnsatisfiable: {{ $ts.whenUnsatisfiable | default "ScheduleAnyway" }}
    labelSelector:
      matchLabels:
        {{- include "nereid.selectorLabels" (list $root (index . 1)) | nindent 8 }}
{{- end }}
{{- end -}}

{{/*
A PodDisruptionBudget for a Deployment of more than one replica: voluntary
evictions (node drains, upgrades) take at most maxUnavailable pods at once
(or keep minAvailable). Call with (list $ "<component>" <values>), <values>
holding replicas and podDisruptionBudget.
*/}}
{{- define "nereid.pdb" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := index . 2 -}}
{{- $pdb := $v.podDisruptionBudget | default dict -}}
{{- if and $pdb.enabled (gt (int $v.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "nereid.name" (list $root $component) }}
  labels:
    {{- include "nereid.labels" (list $root $component) | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" $pdb.minAvailable) }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "nereid.selectorLabels" (list $root $component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
The Secret holding the NATS password of each role (keys gateway, executor,
sequence-router, shm-registry): security.nats.existingSecret, or the one
the chart makes (<release>-nats-credentials) for the in-chart NATS when
security.generateCredentials; empty otherwise (no credentials). Call with $.
*/}}
{{- define "nereid.natsSecret" -}}
{{- if .Values.security.nats.existingSecret -}}
{{- .Values.security.nats.existingSecret -}}
{{- else if and (not .Values.nats.url) .Values.security.generateCredentials -}}
{{- include "nereid.name" (list . "nats-credentials") -}}
{{- end -}}
{{- end -}}

{{/* The same for Redis (keys sequence-router, shm-registry, executor). */}}
{{- define "nereid.redisSecret" -}}
{{- if .Values.security.redis.existingSecret -}}
{{- .Values.security.redis.existingSecret -}}
{{- else if and (not .Values.redis.url) .Values.security.generateCredentials -}}
{{- include "nereid.name" (list . "redis-credentials") -}}
{{- end -}}
{{- end -}}

{{/*
The data of a credentials Secret the chart makes: one random password per
role, the ones already in the cluster's Secret of that name kept (upgrades
do not change them). Call with (list $ "<secret name>" (list "<role>"...)).
*/}}
{{- define "nereid.generatedPasswords" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace $name -}}
{{- $data := dict -}}
{{- if and $existing $existing.data -}}
{{- $data = $existing.data -}}
{{- end -}}
{{- range $role := index . 2 }}
{{- if hasKey $data $role }}
{{ $role }}: {{ index $data $role }}
{{- else }}
{{ $role }}: {{ randAlphaNum 32 | b64enc }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The executor workloads, as a JSON list of pools: "gpu" (executor.gpu, a
DaemonSet), "cpu" (executor.cpu, a Deployment) and executor.nodePools,
each with name, kind, replicas, gpus, gpuResourceName, nodeSelector,
tolerations, affinity, resources, args, runtimeClassName and
priorityClassName. Call with $; read with fromJsonArray.
*/}}
{{- define "nereid.executorPools" -}}
{{- $e := .Values.executor -}}
{{- $pools := list -}}
{{- $fields := list "nodeSelector" "tolerations" "affinity" "resources" "runtimeClassName" "priorityClassName" -}}
{{- if $e.gpu.enabled -}}
{{- $p := dict "name" "gpu" "kind" "DaemonSet" "replicas" 0 "gpus" (int $e.gpu.gpusPerNode) "gpuResourceName" ($e.gpu.resourceName | default "nvidia.com/gpu") "args" list -}}
{{- range $f := $fields }}{{ $_ := set $p $f (index $e.gpu $f) }}{{ end -}}
{{- $pools = append $pools $p -}}
{{- end -}}
{{- if $e.cpu.enabled -}}
{{- $p := dict "name" "cpu" "kind" "Deployment" "replicas" (int $e.cpu.replicas) "gpus" 0 "gpuResourceName" "" "args" list -}}
{{- range $f := $fields }}{{ $_ := set $p $f (index $e.cpu $f) }}{{ end -}}
{{- $pools = append $pools $p -}}
{{- end -}}
{{- range $np := $e.nodePools -}}
{{- $name := required "executor.nodePools[].name is required" $np.name -}}
{{- if has $name (list "gpu" "cpu") -}}
{{- fail (printf "executor.nodePools: the name %q is taken by executor.%s" $name $name) -}}
{{- end -}}
{{- range $pools }}{{ if eq .name $name }}{{ fail (printf "executor.nodePools: two pools named %q" $name) }}{{ end }}{{ end -}}
{{- $kind := index $np "kind" | default "DaemonSet" -}}
{{- if not (has $kind (list "Deployment" "DaemonSet")) -}}
{{- fail (printf "executor.nodePools[%s].kind must be Deployment or DaemonSet, not %q" $name $kind) -}}
{{- end -}}
{{- $gpus := ternary (index $np "gpusPerNode") $e.gpu.gpusPerNode (hasKey $np "gpusPerNode") -}}
{{- $p := dict "name" $name "kind" $kind "replicas" (int (index $np "replicas" | default 1)) "gpus" (int $gpus) "gpuResourceName" (index $np "gpuResourceName" | default ($e.gpu.resourceName | default "nvidia.com/gpu")) "args" (index $np "args" | default list) -}}
{{- range $f := $fields }}{{ $_ := set $p $f (index $np $f) }}{{ end -}}
{{- $pools = append $pools $p -}}
{{- end -}}
{{- toJson $pools -}}
{{- end -}}

{{/* The component labels of the executor pools, as a JSON list. Call with $. */}}
{{- define "nereid.executorComponents" -}}
{{- $names := list -}}
{{- range $p := include "nereid.executorPools" . | fromJsonArray }}
{{- $names = append $names (printf "executor-%s" $p.name) }}
{{- end }}
{{- toJson $names -}}
{{- end -}}

{{/* Pod-level settings every Nereid pod shares. */}}
{{- define "nereid.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* A container's security context: nothing to escalate, nothing to write but volumes. */}}
{{- define "nereid.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}

{{/* /dev/shm for gateway and executors (see values.yaml, sharedMemory). */}}
{{- define "nereid.shmVolume" -}}
{{- if not .Values.sharedMemory.hostIPC }}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.sharedMemory.sizeLimit }}
{{- end }}
{{- end -}}

{{- define "nereid.shmMount" -}}
{{- if not .Values.sharedMemory.hostIPC }}
- name: dshm
  mountPath: /dev/shm
{{- end }}
{{- end -}}

{{/* Liveness and readiness for services serving --probe-addr, and their
--metrics-port. */}}
{{- define "nereid.probes" -}}
ports:
  - name: probe
    containerPort: {{ .Values.probePort }}
  - name: metrics
    containerPort: {{ .Values.metricsPort }}
livenessProbe:
  httpGet:
    path: /livez
    port: probe
  periodSeconds: 10
readinessProbe:
  httpGet:
    path: /readyz
    port: probe
  periodSeconds: 5
{{- end -}}

{{/*
The Secret holding the admin API's restriction (key "restriction",
<header>=<value>): gateway.admin.restrictedSecret, or the one the chart
makes (<release>-gateway-admin). Call with $.
*/}}
{{- define "nereid.adminSecret" -}}
{{- .Values.gateway.admin.restrictedSecret | default (printf "%s-admin" (include "nereid.name" (list . "gateway"))) -}}
{{- end -}}

{{/*
A Nereid container's environment. Call with (list $ "<role>"): the NATS
credentials of the role from security.nats.existingSecret or the generated
Secret (nereid.natsSecret), the Redis ACL
credentials for the router, the registry and the executors, CA paths of mounted TLS
Secrets, and NODE_NAME for gateway and executors (nereid.nodeEnv).
*/}}
{{- define "nereid.env" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- $sec := $root.Values.security -}}
{{- $items := list -}}
{{- if eq $role "executor" }}
{{- $items = append $items (dict "name" "NEREID_EXECUTOR_ID" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) }}
{{- end }}
{{- $admin := $root.Values.gateway.admin }}
{{- if and $admin.enabled (has $role (list "gateway" "executor")) }}
{{- $items = append $items (dict "name" "NEREID_ADMIN_RESTRICTED" "valueFrom" (dict "secretKeyRef" (dict "name" (include "nereid.adminSecret" $root) "key" "restriction"))) }}
{{- end }}
{{- if and $root.Values.sharedMemory.hostIPC (has $role (list "gateway" "executor")) }}
{{- $items = append $items (dict "name" "NODE_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "spec.nodeName"))) }}
{{- end }}
{{- with include "nereid.natsSecret" $root }}
{{- $items = append $items (dict "name" "NEREID_NATS_USER" "value" $role) }}
{{- $items = append $items (dict "name" "NEREID_NATS_PASSWORD" "valueFrom" (dict "secretKeyRef" (dict "name" . "key" $role))) }}
{{- end }}
{{- if $sec.nats.tlsSecret }}
{{- $items = append $items (dict "name" "NEREID_NATS_CA" "value" "/etc/nereid/nats-tls/ca.crt") }}
{{- end }}
{{- if has $role (list "sequence-router" "shm-registry" "executor") }}
{{- with include "nereid.redisSecret" $root }}
{{- $items = append $items (dict "name" "NEREID_REDIS_USER" "value" $role) }}
{{- $items = append $items (dict "name" "NEREID_REDIS_PASSWORD" "valueFrom" (dict "secretKeyRef" (dict "name" . "key" $role))) }}
{{- end }}
{{- if $sec.redis.tlsSecret }}
{{- $items = append $items (dict "name" "NEREID_REDIS_CA" "value" "/etc/nereid/redis-tls/ca.crt") }}
{{- end }}
{{- end }}
{{- with $items }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Mounts of the TLS Secrets a role reads. Call with (list $ "<role>"). */}}
{{- define "nereid.secretMounts" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- $sec := $root.Values.security -}}
{{- if $sec.nats.tlsSecret }}
- name: nats-tls
  mountPath: /etc/nereid/nats-tls
  readOnly: true
{{- end }}
{{- if and $sec.redis.tlsSecret (has $role (list "sequence-router" "shm-registry" "executor")) }}
- name: redis-tls
  mountPath: /etc/nereid/redis-tls
  readOnly: true
{{- end }}
{{- if and $sec.gateway.tlsSecret (eq $role "gateway") }}
- name: gateway-tls
  mountPath: /etc/nereid/tls
  readOnly: true
{{- end }}
{{- if and $sec.gateway.tlsSecret $sec.gateway.grpcTLS $root.Values.gateway.admin.enabled (eq $role "executor") }}
# The preStop drain reaches the gateways' admin API over their TLS.
- name: gateway-tls
  mountPath: /etc/nereid/gateway-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes of the TLS Secrets a role reads. Call with (list $ "<role>"). */}}
{{- define "nereid.secretVolumes" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- $sec := $root.Values.security -}}
{{- with $sec.nats.tlsSecret }}
- name: nats-tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- if has $role (list "sequence-router" "shm-registry" "executor") }}
{{- with $sec.redis.tlsSecret }}
- name: redis-tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- end }}
{{- if or (eq $role "gateway") (and $sec.gateway.grpcTLS $root.Values.gateway.admin.enabled (eq $role "executor")) }}
{{- with $sec.gateway.tlsSecret }}
- name: gateway-tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The gateway's TLS flags (security.gateway). */}}
{{- define "nereid.gatewayTLSArgs" -}}
{{- $g := .Values.security.gateway -}}
{{- if or $g.grpcTLS $g.httpTLS }}
{{- $_ := required "security.gateway.tlsSecret is required with grpcTLS or httpTLS" $g.tlsSecret }}
{{- end }}
{{- range $p := list "grpc" "http" }}
{{- if index $g (printf "%sTLS" $p) }}
- --{{ $p }}-use-ssl=true
- --{{ $p }}-server-cert=/etc/nereid/tls/tls.crt
- --{{ $p }}-server-key=/etc/nereid/tls/tls.key
{{- if index $g (printf "%sMutual" $p) }}
- --{{ $p }}-use-ssl-mutual=true
- --{{ $p }}-root-cert=/etc/nereid/tls/ca.crt
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
With sharedMemory.hostIPC, gateway and executor pods of one node share its
/dev/shm, so they all report the node's name (--node=$(NODE_NAME)): gateways
then hand tensors to, and route shm regions to, the executors of their node.
*/}}
{{- define "nereid.nodeEnv" -}}
{{- if .Values.sharedMemory.hostIPC }}
env:
  - name: NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: spec.nodeName
{{- end }}
{{- end -}}
