{{/*
Chart name, overridable (nameOverride).
*/}}
{{- define "sparkglass.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name: "<release>-<chart>", or the release name alone when it already holds the
chart name. Truncated to 40 characters so that the longest suffix ("-service-auth-delegator")
keeps every object name within Kubernetes' 63.
*/}}
{{- define "sparkglass.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sparkglass.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object. "app.kubernetes.io/managed-by: Helm" tells these apart from the
children the operator creates (managed-by: sparkglass-operator).
*/}}
{{- define "sparkglass.labels" -}}
helm.sh/chart: {{ include "sparkglass.chart" . }}
{{ include "sparkglass.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sparkglass
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sparkglass.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sparkglass.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Per-component labels: call with (dict "ctx" $ "component" "operator"). */}}
{{- define "sparkglass.componentLabels" -}}
{{ include "sparkglass.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sparkglass.componentSelectorLabels" -}}
{{ include "sparkglass.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sparkglass.operator.fullname" -}}
{{- printf "%s-operator" (include "sparkglass.fullname" .) }}
{{- end }}

{{- define "sparkglass.service.fullname" -}}
{{- printf "%s-service" (include "sparkglass.fullname" .) }}
{{- end }}

{{- define "sparkglass.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "sparkglass.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sparkglass.service.serviceAccountName" -}}
{{- if .Values.service.serviceAccount.create }}
{{- default (include "sparkglass.service.fullname" .) .Values.service.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.service.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference; a digest pins it. */}}
{{- define "sparkglass.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Namespaces the operator watches and the service may read: watchNamespaces, else the release
namespace; none (the whole cluster) only with operator.clusterWide=true. Rendered as a JSON
list so callers can `fromJsonArray` it; an empty list means cluster-wide.
*/}}
{{- define "sparkglass.watchNamespaces" -}}
{{- if .Values.operator.clusterWide }}
{{- toJson (list) }}
{{- else if .Values.watchNamespaces }}
{{- toJson .Values.watchNamespaces }}
{{- else }}
{{- toJson (list .Release.Namespace) }}
{{- end }}
{{- end }}

{{/*
Namespaces where drivers run: driver.namespaces, else the watched namespaces, else (a
cluster-wide operator) the release's. Rendered as a JSON list.
*/}}
{{- define "sparkglass.driverNamespaces" -}}
{{- $watched := include "sparkglass.watchNamespaces" . | fromJsonArray }}
{{- if .Values.driver.namespaces }}
{{- toJson .Values.driver.namespaces }}
{{- else if $watched }}
{{- toJson $watched }}
{{- else }}
{{- toJson (list .Release.Namespace) }}
{{- end }}
{{- end }}

{{/* Name of the Secret holding the store URL, and its key. */}}
{{- define "sparkglass.store.secretName" -}}
{{- default (printf "%s-store" (include "sparkglass.fullname" .)) .Values.store.existingSecret }}
{{- end }}

{{- define "sparkglass.store.secretKey" -}}
{{- if .Values.store.existingSecret }}{{ .Values.store.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{/* The Secret and key holding SPARKGLASS_STORE_KEY (the chart's own unless one is named). */}}
{{- define "sparkglass.storeKey.secretName" -}}
{{- default (printf "%s-store-key" (include "sparkglass.fullname" .)) .Values.service.storeKey.existingSecret }}
{{- end }}

{{- define "sparkglass.storeKey.secretKey" -}}
{{- if .Values.service.storeKey.existingSecret }}{{ .Values.service.storeKey.existingSecretKey }}{{ else }}key{{ end }}
{{- end }}

{{/* In-cluster URL of the service (what the operator links DataSample results to). */}}
{{- define "sparkglass.service.internalUrl" -}}
{{- printf "http://%s.%s.svc:%v" (include "sparkglass.service.fullname" .) .Release.Namespace .Values.service.kubernetesService.port }}
{{- end }}

{{/* Base URL users reach the service at: publicUrl, else the first ingress host, else internal. */}}
{{- define "sparkglass.service.publicUrl" -}}
{{- if .Values.service.publicUrl }}
{{- .Values.service.publicUrl | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts }}
{{- $host := (first .Values.ingress.hosts).host }}
{{- printf "%s://%s" (ternary "https" "http" (gt (len .Values.ingress.tls) 0)) $host }}
{{- else }}
{{- include "sparkglass.service.internalUrl" . }}
{{- end }}
{{- end }}

{{/*
Fail early on value combinations the schema cannot express clearly (the schema catches the
rest); these messages are what `helm install` prints.
*/}}
{{- define "sparkglass.validate" -}}
{{- if and .Values.operator.clusterWide .Values.watchNamespaces }}
{{- fail "operator.clusterWide=true watches every namespace: leave watchNamespaces empty (or set operator.clusterWide=false to watch only watchNamespaces)" }}
{{- end }}
{{- if and .Values.operator.clusterWide .Values.networkPolicy.enabled (not .Values.driver.namespaces) }}
{{- fail (printf "operator.clusterWide=true with networkPolicy.enabled: the NetworkPolicies (and the driver ServiceAccount) are rendered per namespace and would cover only %s; list in driver.namespaces every namespace where SparkApplications run, or set networkPolicy.enabled=false and protect the drivers otherwise" .Release.Namespace) }}
{{- end }}
{{- if and (eq .Values.store.type "postgresql") (not .Values.store.existingSecret) (not .Values.store.postgresql.url) }}
{{- fail "store.type=postgresql needs store.existingSecret (a Secret with the URL) or store.postgresql.url" }}
{{- end }}
{{- if and (eq .Values.store.type "sqlite") (gt (int .Values.service.replicas) 1) }}
{{- fail "store.type=sqlite allows service.replicas=1 only (one writer on one volume); use store.type=postgresql" }}
{{- end }}
{{- if and .Values.service.enabled (eq .Values.service.authMode "local") (not .Values.service.localAuth.existingSecret) }}
{{- fail "service.authMode=local needs service.localAuth.existingSecret (a Secret with a `tokens` key)" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- end }}

{{/*
The operator's rules in a namespace it manages (a Role per namespace, or one ClusterRole with
operator.clusterWide=true).
*/}}
{{- define "sparkglass.operator.rules" -}}
# Its own resources: watched by kopf, patched (finalizer, progress annotations), deleted
# after timeToLiveSeconds / ttlSecondsAfterFinished. No create: users and the service do that.
- apiGroups: ["sparkglass.io"]
  resources: ["sparkapplications", "datasamples"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["sparkglass.io"]
  resources: ["sparkapplications/status", "datasamples/status"]
  verbs: ["get", "patch"]
# Children carry blockOwnerDeletion owner references; clusters running the
# OwnerReferencesPermissionEnforcement admission plugin require this to set them.
- apiGroups: ["sparkglass.io"]
  resources: ["sparkapplications/finalizers"]
  verbs: ["update"]
# The driver Pod: created, watched (kopf event handler on driver Pods), replaced; the
# executor Pods Spark creates: watched (status.executorState).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
# The driver's ConfigMap and headless Service: created, kept in line with the spec, and
# watched (list, watch) with a label selector on the operator's own labels, so that one
# deleted or changed is put back at once without reading them on every resync. (Secrets
# are never listed nor watched: that would read every Secret of the namespace.)
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The control Secret: created once, read to call the driver's control endpoint (token,
# certificate to pin); patched to add or renew the TLS certificate before a driver starts.
# Scoped by the namespaces it manages: Secrets cannot be narrowed by a name pattern.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch"]
# Events on SparkApplications and DataSamples (ours and kopf's).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
