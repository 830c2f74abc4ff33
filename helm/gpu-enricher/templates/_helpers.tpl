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

{{/* The counters file: the inline value, else the project's defaults of `naming` (classic, or
dcgm-exporter 4.9's names; "4.9" may come as a number from --set). */}}
{{- define "gpu-enricher.counters" -}}
{{- if .Values.counters }}
{{- .Values.counters }}
{{- else if eq (toString .Values.naming) "4.9" }}
{{- .Files.Get "files/default-counters-4.9.csv" }}
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

{{/* Whether the pod needs its service-account token: a feature reads the Kubernetes API, or
countersConfigMap (-m) is watched there. */}}
{{- define "gpu-enricher.token" -}}
{{- if or (include "gpu-enricher.kubeApi" .) .Values.countersConfigMap }}true{{ end }}
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

{{/* webConfig (--web-config-file). Where its Secrets are mounted in the container: siblings
under one root outside /etc/gpu-enricher, whose counters ConfigMap mount is read-only and so
cannot hold the mount points of further volumes. */}}
{{- define "gpu-enricher.webRoot" -}}
/etc/gpu-enricher-web
{{- end }}

{{- define "gpu-enricher.webConfigPath" -}}
{{- include "gpu-enricher.webRoot" . }}/config/web-config.yml
{{- end }}

{{- define "gpu-enricher.webConfigSecretName" -}}
{{- default (printf "%s-web-config" (include "gpu-enricher.fullname" .)) .Values.webConfig.existingSecret }}
{{- end }}

{{/* "true" when the chart writes the web-config file (a Secret of its own). */}}
{{- define "gpu-enricher.webConfigGenerated" -}}
{{- if and .Values.webConfig.enabled (not .Values.webConfig.existingSecret) }}true{{ end }}
{{- end }}

{{/* "true" when the exporter serves TLS: the server certificate's Secret is mounted. */}}
{{- define "gpu-enricher.webTls" -}}
{{- if and .Values.webConfig.enabled .Values.webConfig.tls.existingSecret }}true{{ end }}
{{- end }}

{{/* "true" when clients are asked for certificates (client_auth_type other than NoClientCert). */}}
{{- define "gpu-enricher.webClientCerts" -}}
{{- if and (include "gpu-enricher.webTls" .) (ne .Values.webConfig.tls.clientAuthType "NoClientCert") }}true{{ end }}
{{- end }}

{{/* The client CA bundle as the exporter reads it: the key of its own Secret, else of the
server certificate's Secret (cert-manager's CA issuer writes ca.crt there). */}}
{{- define "gpu-enricher.webClientCAPath" -}}
{{- $dir := ternary "client-ca" "tls" (ne .Values.webConfig.tls.clientCASecret "") }}
{{- printf "%s/%s/%s" (include "gpu-enricher.webRoot" .) $dir .Values.webConfig.tls.clientCAKey }}
{{- end }}

{{/* "true" when requests may need basic auth: users in the chart's file, or a file of the
operator's own, which the chart cannot read. */}}
{{- define "gpu-enricher.webBasicAuth" -}}
{{- if and .Values.webConfig.enabled (or .Values.webConfig.existingSecret .Values.webConfig.basicAuthUsers) }}true{{ end }}
{{- end }}

{{/* The web-config file the chart writes (exporter-toolkit's keys). Absolute paths: they stay
right whatever the exporter resolves them against (the file itself is a symlink into the
Secret volume's ..data directory). */}}
{{- define "gpu-enricher.webConfigFile" -}}
{{- $w := .Values.webConfig }}
{{- $file := dict }}
{{- if include "gpu-enricher.webTls" . }}
{{- $dir := printf "%s/tls" (include "gpu-enricher.webRoot" .) }}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "min_version" $w.tls.minVersion }}
{{- if include "gpu-enricher.webClientCerts" . }}
{{- $_ := set $tls "client_auth_type" $w.tls.clientAuthType }}
{{- $_ := set $tls "client_ca_file" (include "gpu-enricher.webClientCAPath" .) }}
{{- end }}
{{- $_ := set $file "tls_server_config" $tls }}
{{- end }}
{{- with $w.basicAuthUsers }}
{{- $_ := set $file "basic_auth_users" . }}
{{- end }}
{{- with $w.headers }}
{{- $_ := set $file "http_server_config" (dict "headers" .) }}
{{- end }}
# Written by the gpu-enricher Helm chart from its webConfig values.
{{ toYaml $file }}
{{- end }}

{{/* What a probe does: httpGet on PATH (HTTPS with TLS, with an Authorization header where
basic auth needs one), or tcpSocket where the kubelet cannot pass: it has no client
certificate to present, and without webConfig.probeBasicAuth no credentials. Called with
(list $ PATH). */}}
{{- define "gpu-enricher.probeAction" -}}
{{- $root := index . 0 }}
{{- $w := $root.Values.webConfig }}
{{- $auth := and (include "gpu-enricher.webBasicAuth" $root) $w.probeBasicAuth.username }}
{{- if eq (include "gpu-enricher.probeHandler" $root) "tcpSocket" }}
tcpSocket:
  port: metrics
{{- else }}
httpGet:
  path: {{ index . 1 }}
  port: metrics
  {{- if include "gpu-enricher.webTls" $root }}
  scheme: HTTPS
  {{- end }}
  {{- if $auth }}
  httpHeaders:
    - name: Authorization
      value: {{ printf "Basic %s" (printf "%s:%s" $w.probeBasicAuth.username $w.probeBasicAuth.password | b64enc) | quote }}
  {{- end }}
{{- end }}
{{- end }}

{{/* "tcpSocket" or "httpGet" (see probeAction). */}}
{{- define "gpu-enricher.probeHandler" -}}
{{- $w := .Values.webConfig }}
{{- if and (include "gpu-enricher.webClientCerts" .) (eq $w.tls.clientAuthType "RequireAndVerifyClientCert") }}tcpSocket
{{- else if and (include "gpu-enricher.webBasicAuth" .) (not $w.probeBasicAuth.username) }}tcpSocket
{{- else }}httpGet
{{- end }}
{{- end }}

{{/* Refuses webConfig values that would render a pod or a ServiceMonitor that cannot work;
renders nothing. */}}
{{- define "gpu-enricher.webConfigCheck" -}}
{{- $w := .Values.webConfig }}
{{- if $w.enabled }}
{{- if and (include "gpu-enricher.webConfigGenerated" .) (not (or $w.tls.existingSecret $w.basicAuthUsers $w.headers)) }}
{{- fail "webConfig.enabled: set webConfig.tls.existingSecret (TLS), webConfig.basicAuthUsers or webConfig.headers, or webConfig.existingSecret (a file of your own)" }}
{{- end }}
{{- if and (ne $w.tls.clientAuthType "NoClientCert") (not $w.tls.existingSecret) }}
{{- fail (printf "webConfig.tls.clientAuthType %s: client certificates need TLS (webConfig.tls.existingSecret)" $w.tls.clientAuthType) }}
{{- end }}
{{- if ne (empty $w.probeBasicAuth.username) (empty $w.probeBasicAuth.password) }}
{{- fail "webConfig.probeBasicAuth: set both username and password, or neither" }}
{{- end }}
{{- if and $w.probeBasicAuth.username (include "gpu-enricher.webConfigGenerated" .) $w.basicAuthUsers (not (hasKey $w.basicAuthUsers $w.probeBasicAuth.username)) }}
{{- fail (printf "webConfig.probeBasicAuth.username %s is not in webConfig.basicAuthUsers: the probes would get 401" $w.probeBasicAuth.username) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The same for the ServiceMonitor: Prometheus must be able to scrape what webConfig
serves. */}}
{{- define "gpu-enricher.serviceMonitorWebCheck" -}}
{{- $w := .Values.webConfig }}
{{- $tlsConfig := .Values.serviceMonitor.tlsConfig }}
{{- if $w.enabled }}
{{- if and (include "gpu-enricher.webConfigGenerated" .) $w.basicAuthUsers (not .Values.serviceMonitor.basicAuth) }}
{{- fail "webConfig.basicAuthUsers is set: Prometheus needs serviceMonitor.basicAuth (username and password Secret keys), else every scrape gets 401" }}
{{- end }}
{{- if ne (empty $tlsConfig.cert) (empty $tlsConfig.keySecret) }}
{{- fail "serviceMonitor.tlsConfig: a client certificate needs both cert and keySecret" }}
{{- end }}
{{- if and (include "gpu-enricher.webTls" .) (eq $w.tls.clientAuthType "RequireAndVerifyClientCert") (not $tlsConfig.cert) }}
{{- fail "webConfig.tls.clientAuthType RequireAndVerifyClientCert: Prometheus needs a client certificate (serviceMonitor.tlsConfig.cert and keySecret), else every scrape is refused" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The ServiceMonitor endpoint's scheme, tlsConfig and basicAuth for webConfig. The
Operator reads every Secret and ConfigMap named here from the ServiceMonitor's namespace. */}}
{{- define "gpu-enricher.serviceMonitorWeb" -}}
{{- $w := .Values.webConfig }}
{{- $sm := .Values.serviceMonitor }}
{{- if include "gpu-enricher.webTls" . }}
scheme: https
{{- $tls := dict "serverName" (default (printf "%s.%s.svc" (include "gpu-enricher.fullname" .) .Release.Namespace) $sm.tlsConfig.serverName) }}
{{- if $sm.tlsConfig.ca }}
{{- $_ := set $tls "ca" $sm.tlsConfig.ca }}
{{- else if not $sm.tlsConfig.insecureSkipVerify }}
{{- /* cert-manager writes the issuing CA beside the certificate; a reference to a missing key
would make the Operator drop the ServiceMonitor, so none with insecureSkipVerify. */}}
{{- $_ := set $tls "ca" (dict "secret" (dict "name" $w.tls.existingSecret "key" "ca.crt")) }}
{{- end }}
{{- if $sm.tlsConfig.insecureSkipVerify }}
{{- $_ := set $tls "insecureSkipVerify" true }}
{{- end }}
{{- if and (include "gpu-enricher.webClientCerts" .) $sm.tlsConfig.cert }}
{{- $_ := set $tls "cert" $sm.tlsConfig.cert }}
{{- $_ := set $tls "keySecret" $sm.tlsConfig.keySecret }}
{{- end }}
tlsConfig:
  {{- toYaml $tls | nindent 2 }}
{{- end }}
{{- if and (include "gpu-enricher.webBasicAuth" .) $sm.basicAuth }}
basicAuth:
  {{- toYaml $sm.basicAuth | nindent 2 }}
{{- end }}
{{- end }}
