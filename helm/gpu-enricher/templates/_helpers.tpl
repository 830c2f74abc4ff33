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

{{/* "true" when the exporter reads the host's processes: process metrics, or virtual GPUs
with pod attribution (a shared GPU's memory and utilisation split per pod from its processes).
Mirrors the exporter's Config.reads_proc. */}}
{{- define "gpu-enricher.readsProc" -}}
{{- if or .Values.processMetrics.enabled (and .Values.kubernetes.enabled .Values.kubernetes.virtualGpus) }}true{{ end }}
{{- end }}

{{/* "true" when DRA attribution is on: kubernetes.dra.enabled with pod attribution (-k),
whose kubelet List gives the claims. Mirrors the exporter's Config.reads_slices. */}}
{{- define "gpu-enricher.dra" -}}
{{- if and .Values.kubernetes.enabled .Values.kubernetes.dra.enabled }}true{{ end }}
{{- end }}

{{/* "true" when a feature reads pods from the Kubernetes API: the ClusterRole's pods rule.
Process metrics name pods from the API when processMetrics.kubernetesApi is true, and also
when DRA makes the exporter call the API anyway (one --kubernetes-api switch covers both). */}}
{{- define "gpu-enricher.readsPods" -}}
{{- if or .Values.kubernetes.podLabels.enabled .Values.kubernetes.podUid.enabled (and .Values.processMetrics.enabled (or .Values.processMetrics.kubernetesApi (include "gpu-enricher.dra" .))) }}true{{ end }}
{{- end }}

{{/* "true" when the exporter calls the Kubernetes API (pods, or DRA's ResourceSlices): the
ClusterRole, its binding and the service-account token come with it. Mirrors the exporter's
Config.kube_api, less process metrics when processMetrics.kubernetesApi is false. */}}
{{- define "gpu-enricher.kubeApi" -}}
{{- if or (include "gpu-enricher.readsPods" .) (include "gpu-enricher.dra" .) }}true{{ end }}
{{- end }}

{{/* Whether the pod shares the host's PID namespace: the hostPID value, or process access
through it. */}}
{{- define "gpu-enricher.hostPID" -}}
{{- if or .Values.hostPID (and (include "gpu-enricher.readsProc" .) (eq .Values.processMetrics.procAccess "hostPID")) }}true{{ else }}false{{ end }}
{{- end }}

{{/* The host's /proc as the container sees it (--proc-root). */}}
{{- define "gpu-enricher.procRoot" -}}
{{- if eq .Values.processMetrics.procAccess "hostPID" }}/proc{{ else }}/host/proc{{ end }}
{{- end }}

{{/* Where the host's /var/log/pods and /var/log/containers are mounted: LOG_ROOT/pods and
LOG_ROOT/containers (--kubelet-log-root). */}}
{{- define "gpu-enricher.logRoot" -}}
/host/var/log
{{- end }}
