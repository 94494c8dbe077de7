{{- define "rezuscloud.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rezuscloud.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rezuscloud.labels" -}}
{{ include "rezuscloud.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rezuscloud.claim" -}}
{{- .Values.persistence.existingClaim | default (printf "%s-data" (include "rezuscloud.fullname" .)) -}}
{{- end -}}

{{/* Credentials that the server wants private (mode 0600, its own user):
     a Secret volume is group-readable under fsGroup, so an init container
     copies these into a memory-backed emptyDir. */}}
{{- define "rezuscloud.privateCredentials" -}}
{{- if or .Values.secrets.openstack .Values.secrets.oci }}true{{ end -}}
{{- end -}}
