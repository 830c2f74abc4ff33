{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "gpu-enricher.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: RELEASE-gpu-enricher, or RELEASE when it already
contains the chart name. */}}
{{- define "gpu-enricher.fullname" -}}
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

{{- define "gpu-enricher.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the DaemonSet's pods (immutable once installed). */}}
{{- define "gpu-enricher.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-enricher.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "gpu-enricher.labels" -}}
helm.sh/chart: {{ include "gpu-enricher.chart" . }}
{{ include "gpu-enricher.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: gpu-enricher
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpu-enricher.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-enricher.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpu-enricher.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where the kubelet's pod-resources directory is mounted in the container: the exporter's
default socket path lives there, whatever kubeletRoot is on the node. */}}
{{- define "gpu-enricher.podResourcesMountPath" -}}
/var/lib/kubelet/pod-resources
{{- end }}

{{- define "gpu-enricher.podResourcesHostPath" -}}
{{- printf "%s/pod-resources" (trimSuffix "/" .Values.kubeletRoot) }}
{{- end }}

{{- define "gpu-enricher.countersPath" -}}
/etc/gpu-enricher/counters.csv
{{- end }}

{{/* The counters file: the inline value, else the project's defaults. */}}
{{- define "gpu-enricher.counters" -}}
{{- if .Values.counters }}
{{- .Values.counters }}
{{- else }}
{{- .Files.Get "files/default-counters.csv" }}
{{- end }}
{{- end }}

{{/* "true" when an auto|true|false switch for a Prometheus Operator kind is on. Called with
(list $ enabledValue "monitoring.coreos.com/v1/Kind"). */}}
{{- define "gpu-enricher.crdEnabled" -}}
{{- $root := index . 0 }}
{{- $value := toString (index . 1) }}
{{- if eq $value "true" }}true
{{- else if and (eq $value "auto") ($root.Capabilities.APIVersions.Has (index . 2)) }}true
{{- end }}
{{- end }}

{{- define "gpu-enricher.serviceMonitorEnabled" -}}
{{- include "gpu-enricher.crdEnabled" (list . .Values.serviceMonitor.enabled "monitoring.coreos.com/v1/ServiceMonitor") }}
{{- end }}

{{- define "gpu-enricher.prometheusRuleEnabled" -}}
{{- include "gpu-enricher.crdEnabled" (list . .Values.prometheusRule.enabled "monitoring.coreos.com/v1/PrometheusRule") }}
{{- end }}
