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
credentials of the role from security.nats.existingSecret, the Redis ACL
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
{{- with $sec.nats.existingSecret }}
{{- $items = append $items (dict "name" "NEREID_NATS_USER" "value" $role) }}
{{- $items = append $items (dict "name" "NEREID_NATS_PASSWORD" "valueFrom" (dict "secretKeyRef" (dict "name" . "key" $role))) }}
{{- end }}
{{- if $sec.nats.tlsSecret }}
{{- $items = append $items (dict "name" "NEREID_NATS_CA" "value" "/etc/nereid/nats-tls/ca.crt") }}
{{- end }}
{{- if has $role (list "sequence-router" "shm-registry" "executor") }}
{{- with $sec.redis.existingSecret }}
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
