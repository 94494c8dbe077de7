{{/* The pod of the server: the one pod of the Deployment (bbolt), or
     each replica of the StatefulSet (etcd). */}}
{{- define "rezuscloud.podTemplate" -}}
{{- include "rezuscloud.checks" . -}}
{{- $s := .Values.secrets -}}
{{- $etcd := .Values.etcd -}}
{{- $oidc := .Values.oidc -}}
{{- $replicas := include "rezuscloud.etcdStore" . -}}
{{- $private := include "rezuscloud.privateCredentials" . -}}
metadata:
  labels:
    {{- include "rezuscloud.selectorLabels" . | nindent 4 }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $private }}
  initContainers:
    # The server refuses credentials files that others may read; a
    # Secret volume is group-readable under fsGroup. This copies them,
    # mode 0600, into memory.
    - name: private-credentials
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command:
        - /bin/sh
        - -ec
        - |
          for d in openstack oci etcd; do
            [ -d "/etc/rezuscloud/secrets/$d" ] || continue
            install -d -m 0700 "/etc/rezuscloud/private/$d"
            for f in "/etc/rezuscloud/secrets/$d"/*; do install -m 0600 "$f" "/etc/rezuscloud/private/$d/"; done
          done
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      resources:
        requests: {cpu: 10m, memory: 16Mi}
        limits: {memory: 32Mi}
      volumeMounts:
        - {name: private, mountPath: /etc/rezuscloud/private}
        {{- with $s.openstack }}
        - {name: openstack, mountPath: /etc/rezuscloud/secrets/openstack, readOnly: true}
        {{- end }}
        {{- with $s.oci }}
        - {name: oci, mountPath: /etc/rezuscloud/secrets/oci, readOnly: true}
        {{- end }}
        {{- if $etcd.clientSecret }}
        - {name: etcd, mountPath: /etc/rezuscloud/secrets/etcd, readOnly: true}
        {{- end }}
  {{- end }}
  containers:
    - name: rezuscloud
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      # The image's entrypoint is `rezuscloud serve` with the data dir,
      # tofu, the provider mirror, --listen=0.0.0.0:8080 and
      # --tokens-file=/etc/rezuscloud/tokens/tokens.
      args:
        - --workers={{ .Values.workers }}
        {{- with .Values.repo.url }}
        - --repo={{ . }}
        {{- end }}
        {{- with .Values.repo.branch }}
        - --branch={{ . }}
        {{- end }}
        {{- with .Values.repo.path }}
        - --path={{ . }}
        {{- end }}
        {{- if $s.webhook }}
        - --webhook-secret-file=/etc/rezuscloud/webhook/secret
        {{- end }}
        {{- if $s.openstack }}
        - --openstack-clouds=/etc/rezuscloud/private/openstack/clouds.yaml
        {{- end }}
        {{- if $s.oci }}
        - --oci-config=/etc/rezuscloud/private/oci/config
        {{- end }}
        {{- if $s.githubToken }}
        - --github-token-file=/etc/rezuscloud/github/token
        {{- end }}
        {{- if $s.gitlabToken }}
        - --gitlab-token-file=/etc/rezuscloud/gitlab/token
        {{- end }}
        {{- if $s.sopsAge }}
        - --sops-age-key-file=/etc/rezuscloud/sops/age.agekey
        {{- end }}
        {{- if $s.notifications }}
        - --notifications=/etc/rezuscloud/notifications/notifications.yaml
        {{- end }}
        {{- if $s.users }}
        - --users-file=/etc/rezuscloud/users/users
        {{- end }}
        {{- with $oidc.issuer }}
        - --oidc-issuer={{ . }}
        - --oidc-client-id={{ $oidc.clientID }}
        {{- end }}
        {{- if $s.oidcClientSecret }}
        - --oidc-client-secret-file=/etc/rezuscloud/oidc/client-secret
        {{- end }}
        {{- with $oidc.cliClientID }}
        - --oidc-cli-client-id={{ . }}
        {{- end }}
        {{- with $oidc.roleMap }}
        - --oidc-role-map={{ . }}
        {{- end }}
        {{- with $oidc.scopes }}
        - --oidc-scopes={{ join "," . }}
        {{- end }}
        {{- if $replicas }}
        {{- include "rezuscloud.replicaArgs" . | nindent 8 }}
        {{- end }}
        {{- range .Values.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      env:
        {{- if $replicas }}
        # Each replica is named after its pod.
        - name: REZUSCLOUD_REPLICA_NAME
          valueFrom:
            fieldRef: {fieldPath: metadata.name}
        {{- end }}
        # Paths only: the values stay in the mounted files.
        {{- if and $s.git.secret (eq $s.git.type "token") }}
        - {name: REZUSCLOUD_GIT_TOKEN_FILE, value: /etc/rezuscloud/git/token}
        {{- with $s.git.username }}
        - {name: REZUSCLOUD_GIT_USERNAME, value: {{ . | quote }}}
        {{- end }}
        {{- end }}
        {{- if and $s.git.secret (eq $s.git.type "ssh") }}
        - {name: REZUSCLOUD_GIT_SSH_KEY_FILE, value: /etc/rezuscloud/git/ssh-privatekey}
        - {name: REZUSCLOUD_GIT_KNOWN_HOSTS_FILE, value: /etc/rezuscloud/git/known_hosts}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: 8080
          protocol: TCP
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      readinessProbe:
        httpGet: {path: /readyz, port: http}
        periodSeconds: 5
        timeoutSeconds: 5
      startupProbe:
        httpGet: {path: /healthz, port: http}
        periodSeconds: 2
        failureThreshold: 60
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      volumeMounts:
        - {name: data, mountPath: /var/lib/rezuscloud}
        - {name: tmp, mountPath: /tmp}
        - {name: tokens, mountPath: /etc/rezuscloud/tokens, readOnly: true}
        {{- if $s.webhook }}
        - {name: webhook, mountPath: /etc/rezuscloud/webhook, readOnly: true}
        {{- end }}
        {{- if $s.git.secret }}
        - {name: git, mountPath: /etc/rezuscloud/git, readOnly: true}
        {{- end }}
        {{- if $s.githubToken }}
        - {name: github, mountPath: /etc/rezuscloud/github, readOnly: true}
        {{- end }}
        {{- if $s.gitlabToken }}
        - {name: gitlab, mountPath: /etc/rezuscloud/gitlab, readOnly: true}
        {{- end }}
        {{- if $s.sopsAge }}
        - {name: sops, mountPath: /etc/rezuscloud/sops, readOnly: true}
        {{- end }}
        {{- if $s.notifications }}
        - {name: notifications, mountPath: /etc/rezuscloud/notifications, readOnly: true}
        {{- end }}
        {{- if $s.users }}
        - {name: users, mountPath: /etc/rezuscloud/users, readOnly: true}
        {{- end }}
        {{- if $s.oidcClientSecret }}
        - {name: oidc, mountPath: /etc/rezuscloud/oidc, readOnly: true}
        {{- end }}
        {{- if $private }}
        - {name: private, mountPath: /etc/rezuscloud/private, readOnly: true}
        {{- end }}
  volumes:
    {{- if not $replicas }}
    - name: data
      persistentVolumeClaim:
        claimName: {{ include "rezuscloud.claim" . }}
    {{- end }}
    - name: tmp
      emptyDir: {}
    - name: tokens
      secret:
        secretName: {{ required "secrets.tokens: the Secret holding the tokens file is required" $s.tokens | quote }}
        defaultMode: 0440
        items: [{key: tokens, path: tokens}]
    {{- with $s.webhook }}
    - name: webhook
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: secret, path: secret}]
    {{- end }}
    {{- with $s.git.secret }}
    - name: git
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
    {{- end }}
    {{- with $s.githubToken }}
    - name: github
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: token, path: token}]
    {{- end }}
    {{- with $s.gitlabToken }}
    - name: gitlab
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: token, path: token}]
    {{- end }}
    {{- with $s.sopsAge }}
    - name: sops
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: age.agekey, path: age.agekey}]
    {{- end }}
    {{- with $s.notifications }}
    # Every key a file: the config and the secret files it names.
    - name: notifications
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
    {{- end }}
    {{- with $s.users }}
    - name: users
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: users, path: users}]
    {{- end }}
    {{- with $s.oidcClientSecret }}
    - name: oidc
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: client-secret, path: client-secret}]
    {{- end }}
    {{- with $s.openstack }}
    - name: openstack
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: clouds.yaml, path: clouds.yaml}]
    {{- end }}
    {{- with $s.oci }}
    - name: oci
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
    {{- end }}
    {{- with $etcd.clientSecret }}
    - name: etcd
      secret:
        secretName: {{ . | quote }}
        defaultMode: 0440
        items: [{key: ca.crt, path: ca.crt}, {key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}]
    {{- end }}
    {{- if $private }}
    - name: private
      emptyDir:
        medium: Memory
        sizeLimit: 1Mi
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
