{{/* The name of the manager and of what belongs to it. */}}
{{- define "kao.name" -}}
{{- printf "%s-manager" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kao.labels" -}}
app.kubernetes.io/name: kao
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kao.selector" -}}
app.kubernetes.io/name: kao
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "kao.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The manager's rules: config/rbac/role.yaml's, copied by make manifests,
and config/rbac-job-executor's when runs are Jobs. */}}
{{- define "kao.rules" -}}
{{ .Files.Get "files/manager-rules.yaml" }}
{{- if eq .Values.executor.type "job" }}
{{ .Files.Get "files/job-executor-rules.yaml" }}
{{- end }}
{{- end -}}
