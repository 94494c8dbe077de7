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
{{- if or .Values.secrets.openstack .Values.secrets.oci .Values.etcd.clientSecret }}true{{ end -}}
{{- end -}}

{{/* "true" when the store is in etcd, where the servers run as replicas
     of a StatefulSet: with the chart's own etcd or an existing one. */}}
{{- define "rezuscloud.etcdStore" -}}
{{- if or .Values.etcd.enabled .Values.etcd.endpoints }}true{{ end -}}
{{- end -}}

{{/* The headless Service that gives each replica its DNS name. */}}
{{- define "rezuscloud.replicasService" -}}
{{- printf "%s-replicas" (include "rezuscloud.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The flags of a replica on the store in etcd. */}}
{{- define "rezuscloud.replicaArgs" -}}
{{- $ns := .Release.Namespace -}}
- --store=etcd
- --etcd-endpoints={{ include "rezuscloud.etcdEndpoints" . }}
{{- with .Values.etcd.prefix }}
- --etcd-prefix={{ . }}
{{- end }}
{{- if .Values.etcd.clientSecret }}
- --etcd-ca-file=/etc/rezuscloud/private/etcd/ca.crt
- --etcd-cert-file=/etc/rezuscloud/private/etcd/tls.crt
- --etcd-key-file=/etc/rezuscloud/private/etcd/tls.key
{{- end }}
{{- with .Values.leaseTTL }}
- --lease-ttl={{ . }}
{{- end }}
- --state-url=http://{{ include "rezuscloud.fullname" . }}.{{ $ns }}.svc:{{ .Values.service.port }}
- --advertise-url=http://$(REZUSCLOUD_REPLICA_NAME).{{ include "rezuscloud.replicasService" . }}.{{ $ns }}.svc:8080
{{- end -}}

{{/* Names and labels of the chart's own etcd (etcd.enabled). Its pods
     carry labels of their own, which the server's Services never select. */}}
{{- define "rezuscloud.etcdName" -}}
{{- printf "%s-etcd" (include "rezuscloud.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rezuscloud.etcdSelectorLabels" -}}
app.kubernetes.io/name: etcd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
{{- end -}}

{{- define "rezuscloud.etcdLabels" -}}
{{ include "rezuscloud.etcdSelectorLabels" . }}
app.kubernetes.io/version: {{ .Values.etcd.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The URL of member i of the chart's etcd on port. */}}
{{- define "rezuscloud.etcdMemberURL" -}}
{{- $name := include "rezuscloud.etcdName" .root -}}
{{- printf "https://%s-%d.%s.%s.svc:%d" $name (int .i) $name .root.Release.Namespace (int .port) -}}
{{- end -}}

{{/* The client URLs of etcd, comma-separated: the chart's members, or
     etcd.endpoints. */}}
{{- define "rezuscloud.etcdEndpoints" -}}
{{- if .Values.etcd.enabled -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.members) -}}
{{- $urls = append $urls (include "rezuscloud.etcdMemberURL" (dict "root" $ "i" $i "port" 2379)) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- join "," .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{/* Settings that do not go together, refused before anything renders. */}}
{{- define "rezuscloud.checks" -}}
{{- $v := .Values -}}
{{- if not (has $v.secrets.git.type (list "token" "ssh")) }}
{{- fail (printf "secrets.git.type %q: want token or ssh" $v.secrets.git.type) }}
{{- end }}
{{- if lt (int $v.replicas) 1 }}
{{- fail (printf "replicas: %v: want 1 or more" $v.replicas) }}
{{- end }}
{{- if and (gt (int $v.replicas) 1) (not (include "rezuscloud.etcdStore" .)) }}
{{- fail (printf "replicas: %v needs the store in etcd (bbolt has one writer): set etcd.enabled for the chart's own etcd, or etcd.endpoints (and etcd.clientSecret) for an existing one" $v.replicas) }}
{{- end }}
{{- if and $v.etcd.enabled $v.etcd.endpoints }}
{{- fail "etcd.enabled runs the chart's own etcd, and etcd.endpoints names an existing one: set one of them" }}
{{- end }}
{{- if and (include "rezuscloud.etcdStore" .) $v.persistence.existingClaim }}
{{- fail "persistence.existingClaim is one volume, for one server on bbolt: on etcd every replica gets a claim of its own (persistence.size, persistence.storageClass)" }}
{{- end }}
{{- if and $v.oidc.issuer (not $v.oidc.clientID) }}
{{- fail "oidc.issuer needs oidc.clientID, the dashboard's client ID at the provider" }}
{{- end }}
{{- if and (not $v.oidc.issuer) (or $v.oidc.clientID $v.oidc.cliClientID $v.oidc.roleMap $v.oidc.scopes $v.secrets.oidcClientSecret) }}
{{- fail "oidc.clientID, oidc.cliClientID, oidc.roleMap, oidc.scopes and secrets.oidcClientSecret need oidc.issuer, the OpenID Connect provider's issuer URL" }}
{{- end }}
{{- if $v.etcd.enabled }}
{{- if not (has (int $v.etcd.members) (list 3 5)) }}
{{- fail (printf "etcd.members: %v: want 3 or 5 (an etcd of n members goes on while a majority lives)" $v.etcd.members) }}
{{- end }}
{{- if not (and $v.etcd.serverSecret $v.etcd.clientSecret) }}
{{- fail "etcd.enabled needs etcd.serverSecret (the members' certificate) and etcd.clientSecret (the servers' client certificate): Secrets with ca.crt, tls.crt and tls.key (docs/replicas.md)" }}
{{- end }}
{{- end }}
{{- end -}}
