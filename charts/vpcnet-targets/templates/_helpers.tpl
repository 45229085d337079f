{{/* Names, labels and the image reference of the vpcnet-targets chart. */}}

{{- define "vpcnet-targets.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vpcnet-targets.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "vpcnet-targets.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "vpcnet-targets.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vpcnet-targets.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vpcnet-targets.labels" -}}
{{ include "vpcnet-targets.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "vpcnet-targets.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vpcnet-targets.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "vpcnet-targets.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.override -}}
{{- .Values.image.override -}}
{{- else if .Values.image.overrideRepository -}}
{{- printf "%s:%s" .Values.image.overrideRepository $tag -}}
{{- else -}}
{{- printf "localhost/vpcnet/vpcnet-targets:%s" $tag -}}
{{- end -}}
{{- end -}}
