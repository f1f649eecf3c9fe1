{{/*
The base of every object name: the release name, or "<release>-metascript" when the release
name does not contain the chart's name; fullnameOverride wins. `helm install metascript …`
gives "metascript", the names of deploy/.
*/}}
{{- define "metascript.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The operator's built-in names assume "metascript"; any other base is passed as flags. */}}
{{- define "metascript.renamed" -}}
{{- if ne (include "metascript.fullname" .) "metascript" -}}true{{- end -}}
{{- end -}}

{{/* The pods' labels that the Deployment, PodDisruptionBudget and Services select on. */}}
{{- define "metascript.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metascript.fullname" . }}
{{- end -}}

{{- define "metascript.labels" -}}
{{ include "metascript.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "metascript.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The RBAC subject: the operator's ServiceAccount. */}}
{{- define "metascript.subject" -}}
- kind: ServiceAccount
  name: {{ include "metascript.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{- define "metascript.checks" -}}
{{- if and .Values.sharding.enabled .Values.leaderElection.enabled -}}
{{- fail "sharding.enabled and leaderElection.enabled exclude each other: choose one" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not (or .Values.sharding.enabled .Values.leaderElection.enabled)) -}}
{{- fail "replicas > 1 needs sharding.enabled or leaderElection.enabled: without either every replica writes everything" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled (it selects that Service)" -}}
{{- end -}}
{{- end -}}

{{/*
The chart's CRDs that exist in the cluster but belong to no release of this name and namespace
(applied from crds/ or deploy/ with kubectl, or by another release), one name a line. Helm takes
over nothing it did not create, so rendering them fails the install; they are left as they are.
Empty under `helm template`, which sees no cluster.
*/}}
{{- define "metascript.foreignCrds" -}}
{{- range $document := regexSplit "(?m)^---\\s*$" ($.Files.Get "files/metascript.dev.yaml") -1 }}
{{- $crd := fromYaml $document }}
{{- if $crd.kind }}
{{- $live := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $crd.metadata.name }}
{{- if $live }}
{{- $annotations := default dict $live.metadata.annotations }}
{{- if not (and (eq (get $annotations "meta.helm.sh/release-name") $.Release.Name) (eq (get $annotations "meta.helm.sh/release-namespace") $.Release.Namespace)) }}
{{ $crd.metadata.name }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
