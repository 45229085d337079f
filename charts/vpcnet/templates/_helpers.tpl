{{/* Names, labels and image references of the vpcnet chart. */}}

{{- define "vpcnet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* fullnameOverride, else <release>-<name> (the release name alone when it holds the name). */}}
{{- define "vpcnet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "vpcnet.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "vpcnet.labels" -}}
app.kubernetes.io/name: {{ include "vpcnet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
k8s-app: aws-node
{{- end -}}

{{- define "vpcnet.selectorLabels" -}}
{{- if .Values.originalMatchLabels -}}
k8s-app: aws-node
{{- else -}}
app.kubernetes.io/name: {{ include "vpcnet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- end -}}

{{- define "vpcnet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vpcnet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The node image: override, else overrideRepository:tag, else localhost/vpcnet/vpcnet-node:tag. */}}
{{- define "vpcnet.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.override -}}
{{- .Values.image.override -}}
{{- else if .Values.image.overrideRepository -}}
{{- printf "%s:%s" .Values.image.overrideRepository $tag -}}
{{- else -}}
{{- printf "localhost/vpcnet/vpcnet-node:%s" $tag -}}
{{- end -}}
{{- end -}}

{{/* The init container's image: its own override or overrideRepository, else the agent's
repository with init.image.tag, else the agent's image. */}}
{{- define "vpcnet.initImage" -}}
{{- $i := .Values.init.image -}}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) $i.tag -}}
{{- if $i.override -}}
{{- $i.override -}}
{{- else if $i.overrideRepository -}}
{{- printf "%s:%s" $i.overrideRepository $tag -}}
{{- else if and $i.tag (not .Values.image.override) -}}
{{- printf "%s:%s" (default "localhost/vpcnet/vpcnet-node" .Values.image.overrideRepository) $tag -}}
{{- else -}}
{{- include "vpcnet.image" . -}}
{{- end -}}
{{- end -}}

{{/* Whether the agent enforces NetworkPolicy: enableNetworkPolicy, unless nodeAgent.enabled is
false (as the VPC CNI chart: without its node agent nothing enforces). */}}
{{- define "vpcnet.networkPolicy" -}}
{{- $agent := true -}}
{{- if and .Values.nodeAgent (hasKey .Values.nodeAgent "enabled") -}}
{{- $agent = .Values.nodeAgent.enabled -}}
{{- end -}}
{{- if and (eq (toString .Values.enableNetworkPolicy) "true") (ne (toString $agent) "false") -}}true{{- end -}}
{{- end -}}

{{/* Whether the agent writes policy event logs: nodeAgent.enablePolicyEventLogs, with
enforcement on (the refusals reject it without). */}}
{{- define "vpcnet.policyEventLogs" -}}
{{- if and (include "vpcnet.networkPolicy" .) (eq (toString (dig "enablePolicyEventLogs" "false" (default dict .Values.nodeAgent))) "true") -}}true{{- end -}}
{{- end -}}

{{/* Whether env names ANNOTATE_POD_IP true (the VPC CNI's spellings of true). */}}
{{- define "vpcnet.annotatePodIp" -}}
{{- $v := toString (index .Values.env "ANNOTATE_POD_IP" | default "") -}}
{{- if has $v (list "1" "t" "T" "TRUE" "true" "True") -}}true{{- end -}}
{{- end -}}

{{/* The probe command: the values' command, with --endpoint INTROSPECTION_BIND_ADDRESS added to
the default `vpcnet inspect` one when env sets that address. */}}
{{- define "vpcnet.probeExec" -}}
{{- $cmd := .probe.exec.command -}}
{{- $addr := index .env "INTROSPECTION_BIND_ADDRESS" | default "" -}}
{{- if and $addr (eq (index $cmd 0) "/usr/bin/vpcnet") (not (has "--endpoint" $cmd)) -}}
{{- $cmd = concat $cmd (list "--endpoint" $addr) -}}
{{- end -}}
{{- toYaml (dict "exec" (dict "command" $cmd)) -}}
{{- end -}}
