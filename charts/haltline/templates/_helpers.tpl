{{/* Names. */}}
{{- define "haltline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "haltline.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "haltline.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "haltline.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "haltline.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "haltline.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "haltline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "haltline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "haltline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "haltline.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "haltline.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "haltline.policiesConfigMap" -}}
{{- default (printf "%s-policies" (include "haltline.fullname" .)) .Values.policies.existingConfigMap -}}
{{- end -}}

{{- define "haltline.pricesConfigMap" -}}
{{- default (printf "%s-prices" (include "haltline.fullname" .)) .Values.prices.existingConfigMap -}}
{{- end -}}

{{- define "haltline.hasPolicies" -}}
{{- if or .Values.policies.files .Values.policies.existingConfigMap }}true{{ end -}}
{{- end -}}

{{- define "haltline.hasPrices" -}}
{{- if or .Values.prices.catalog .Values.prices.existingConfigMap }}true{{ end -}}
{{- end -}}

{{/*
gateway.yaml: the user's config with the keys the chart owns set on top
(addresses, paths of mounted files, store, key environment variables).
*/}}
{{- define "haltline.config" -}}
{{- $host := ternary "127.0.0.1" "0.0.0.0" (eq .Values.mode "sidecar") -}}
{{- $p := .Values.providers -}}
{{- $owned := dict
  "listen" (printf "%s:%d" $host (int .Values.ports.http))
  "admin" (dict "listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) "token_env" (ternary "HALTLINE_ADMIN_TOKEN" "" (ne .Values.admin.tokenSecret.name "")))
  "providers" (dict
    "openai" (dict "base_url" $p.openai.baseUrl "api_key_env" (ternary "OPENAI_API_KEY" "" (ne $p.openai.apiKeySecret.name "")))
    "anthropic" (dict "base_url" $p.anthropic.baseUrl "api_key_env" (ternary "ANTHROPIC_API_KEY" "" (ne $p.anthropic.apiKeySecret.name ""))))
  "store" (ternary (dict "redis_url" .Values.store.redisUrl) (dict "data_dir" "/var/lib/haltline") (ne .Values.store.redisUrl ""))
-}}
{{- if .Values.extproc.enabled -}}
{{- $_ := set $owned "extproc_listen" (printf "%s:%d" $host (int .Values.ports.extproc)) -}}
{{- end -}}
{{- if include "haltline.hasPolicies" . -}}
{{- $_ := set $owned "policy_dir" "/etc/haltline/rego" -}}
{{- end -}}
{{- if include "haltline.hasPrices" . -}}
{{- $_ := set $owned "prices" "/etc/haltline/prices/prices.yaml" -}}
{{- end -}}
{{- toYaml (mergeOverwrite (deepCopy (default dict .Values.config)) $owned) -}}
{{- end -}}

{{/*
Native sidecars (an init container with restartPolicy: Always) exist from
Kubernetes 1.29; before that the gateway is a plain second container.
*/}}
{{- define "haltline.native" -}}
{{- if and (eq .Values.mode "sidecar") .Values.sidecar.native (semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version) }}true{{ end -}}
{{- end -}}

{{/* The gateway container, shared by both modes. */}}
{{- define "haltline.container" -}}
name: haltline
image: {{ include "haltline.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args: [serve, --config, /etc/haltline/config/gateway.yaml]
{{- if include "haltline.native" . }}
# A native sidecar: started before the agent, stopped after it.
restartPolicy: Always
{{- end }}
ports:
  - {name: http, containerPort: {{ .Values.ports.http }}, protocol: TCP}
  - {name: admin, containerPort: {{ .Values.ports.admin }}, protocol: TCP}
  {{- if .Values.extproc.enabled }}
  - {name: extproc, containerPort: {{ .Values.ports.extproc }}, protocol: TCP}
  {{- end }}
{{- $env := list }}
{{- range $var, $s := dict "OPENAI_API_KEY" .Values.providers.openai.apiKeySecret "ANTHROPIC_API_KEY" .Values.providers.anthropic.apiKeySecret "HALTLINE_ADMIN_TOKEN" .Values.admin.tokenSecret }}
{{- if $s.name }}
{{- $env = append $env (dict "name" $var "valueFrom" (dict "secretKeyRef" (dict "name" $s.name "key" $s.key))) }}
{{- end }}
{{- end }}
{{- if $env }}
env:
  {{- toYaml $env | nindent 2 }}
{{- end }}
livenessProbe:
  httpGet: {path: /healthz, port: admin}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /readyz, port: admin}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
{{- if and .Values.preStopSleepSeconds (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) }}
lifecycle:
  # Keep serving while endpoints are withdrawn, then drain on SIGTERM
  # (the sleep action needs no shell in the image: Kubernetes >= 1.30).
  preStop:
    sleep: {seconds: {{ .Values.preStopSleepSeconds }}}
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - {name: config, mountPath: /etc/haltline/config, readOnly: true}
  {{- if include "haltline.hasPolicies" . }}
  - {name: policies, mountPath: /etc/haltline/rego, readOnly: true}
  {{- end }}
  {{- if include "haltline.hasPrices" . }}
  - {name: prices, mountPath: /etc/haltline/prices, readOnly: true}
  {{- end }}
  {{- if not .Values.store.redisUrl }}
  - {name: data, mountPath: /var/lib/haltline}
  {{- end }}
  - {name: tmp, mountPath: /tmp}
{{- end -}}

{{/* The gateway's volumes. */}}
{{- define "haltline.volumes" -}}
- name: config
  configMap: {name: {{ include "haltline.fullname" . }}-config}
{{- if include "haltline.hasPolicies" . }}
- name: policies
  configMap: {name: {{ include "haltline.policiesConfigMap" . }}}
{{- end }}
{{- if include "haltline.hasPrices" . }}
- name: prices
  configMap: {name: {{ include "haltline.pricesConfigMap" . }}}
{{- end }}
{{- if not .Values.store.redisUrl }}
- name: data
  {{- if .Values.store.persistence.existingClaim }}
  persistentVolumeClaim: {claimName: {{ .Values.store.persistence.existingClaim }}}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* Pod-level settings shared by both modes. */}}
{{- define "haltline.podSpecCommon" -}}
serviceAccountName: {{ include "haltline.serviceAccountName" . }}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "haltline.podAnnotations" -}}
checksum/config: {{ include "haltline.config" . | sha256sum }}
checksum/policies: {{ toYaml .Values.policies.files | sha256sum }}
checksum/prices: {{ .Values.prices.catalog | sha256sum }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}
