{{/* The chart's name, and the release's full name (63 characters at most, DNS labels). */}}
{{- define "rosettaserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rosettaserve.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rosettaserve.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource; "component" says which part (server, scheduler, prefill, decode). */}}
{{- define "rosettaserve.labels" -}}
helm.sh/chart: {{ include "rosettaserve.chart" .root }}
{{ include "rosettaserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: rosettaserve
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{- define "rosettaserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rosettaserve.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "rosettaserve.image" -}}
{{- $flavour := ternary "llm" "slim" .Values.pd.enabled }}
{{- $tag := default (printf "%s-%s" .Chart.AppVersion $flavour) .Values.image.tag }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}

{{- define "rosettaserve.scheme" -}}
{{- ternary "HTTPS" "HTTP" .Values.tls.enabled }}
{{- end }}

{{/* The contract's --tls-* and --api-key* options, from the mounted Secrets. */}}
{{- define "rosettaserve.securityArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-cert
- /etc/rosettaserve/tls/tls.crt
- --tls-key
- /etc/rosettaserve/tls/tls.key
{{- if .Values.tls.clientAuth }}
- --tls-client-ca
- /etc/rosettaserve/tls/ca.crt
{{- end }}
{{- end }}
{{- if and .Values.apiKeys.enabled .Values.apiKeys.fileSecretName }}
- --api-key-file
- /etc/rosettaserve/api-keys/{{ .Values.apiKeys.fileKey }}
{{- end }}
{{- end }}

{{/* What a PD process sends its peers: their CA, our client certificate, the key. */}}
{{- define "rosettaserve.peerArgs" -}}
{{- if .Values.tls.enabled }}
- --peer-ca
- /etc/rosettaserve/tls/ca.crt
{{- if .Values.tls.clientAuth }}
- --peer-cert
- /etc/rosettaserve/tls/tls.crt
- --peer-key
- /etc/rosettaserve/tls/tls.key
{{- end }}
{{- end }}
{{- if and .Values.apiKeys.enabled .Values.apiKeys.secretName }}
- --peer-api-key
- $(ROSETTASERVE_API_KEY)
{{- end }}
{{- end }}

{{- define "rosettaserve.securityEnv" -}}
{{- if and .Values.apiKeys.enabled .Values.apiKeys.secretName }}
- name: ROSETTASERVE_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.apiKeys.secretName }}
      key: {{ .Values.apiKeys.envKey }}
{{- end }}
{{- end }}

{{- define "rosettaserve.securityMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/rosettaserve/tls
  readOnly: true
{{- end }}
{{- if and .Values.apiKeys.enabled .Values.apiKeys.fileSecretName }}
- name: api-keys
  mountPath: /etc/rosettaserve/api-keys
  readOnly: true
{{- end }}
{{- end }}

{{- define "rosettaserve.securityVolumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ required "tls.secretName is required when tls.enabled" .Values.tls.secretName }}
{{- end }}
{{- if and .Values.apiKeys.enabled .Values.apiKeys.fileSecretName }}
- name: api-keys
  secret:
    secretName: {{ .Values.apiKeys.fileSecretName }}
{{- end }}
{{- end }}

{{/* Probes on the OIP health endpoints (always open, key or not). */}}
{{- define "rosettaserve.probes" -}}
startupProbe:
  httpGet: {path: /v2/health/live, port: http, scheme: {{ include "rosettaserve.scheme" .root }}}
  {{- toYaml .root.Values.probes.startup | nindent 2 }}
livenessProbe:
  httpGet: {path: /v2/health/live, port: http, scheme: {{ include "rosettaserve.scheme" .root }}}
  {{- toYaml .root.Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /v2/health/ready, port: http, scheme: {{ include "rosettaserve.scheme" .root }}}
  {{- toYaml .root.Values.probes.readiness | nindent 2 }}
{{- end }}

{{/* The pod template's common part: security context, scheduling, pull secrets. */}}
{{- define "rosettaserve.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.server.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.server.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.server.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
