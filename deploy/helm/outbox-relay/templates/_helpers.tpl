{{/*
Names and labels, as `helm create` makes them.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "outbox-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources: fullnameOverride, or release-chart,
or the release name alone when it contains the chart name. At most 63
characters (DNS label).
*/}}
{{- define "outbox-relay.fullname" -}}
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

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "outbox-relay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels of every resource. */}}
{{- define "outbox-relay.labels" -}}
helm.sh/chart: {{ include "outbox-relay.chart" . }}
{{ include "outbox-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ include "outbox-relay.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: relay
{{- end }}

{{/* The labels that select the relay's pods: never change them in an upgrade. */}}
{{- define "outbox-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount's name. */}}
{{- define "outbox-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "outbox-relay.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image tag: image.tag, or the chart's appVersion. */}}
{{- define "outbox-relay.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The port of the relay's endpoint (/metrics, /livez, /readyz): the port of
env.RELAY_HTTP_ADDR, or the relay's default 8461. The probes, the Service
and Prometheus reach the pod's IP, so the address must listen on all of the
pod's addresses (":PORT", "0.0.0.0:PORT" or "[::]:PORT") on a fixed port.
*/}}
{{- define "outbox-relay.httpPort" -}}
{{- if not (hasKey .Values.env "RELAY_HTTP_ADDR") }}
{{- 8461 }}
{{- else }}
{{- $addr := toString .Values.env.RELAY_HTTP_ADDR }}
{{- if not (regexMatch "^(|0\\.0\\.0\\.0|\\[::\\]):[0-9]+$" $addr) }}
{{- fail (printf "env.RELAY_HTTP_ADDR=%q: the chart's probes, Service and ServiceMonitor need the endpoint on all of the pod's addresses, like \":8461\"" $addr) }}
{{- end }}
{{- $port := regexFind "[0-9]+$" $addr | atoi }}
{{- if or (lt $port 1) (gt $port 65535) }}
{{- fail (printf "env.RELAY_HTTP_ADDR=%q: want a port from 1 to 65535" $addr) }}
{{- end }}
{{- $port }}
{{- end }}
{{- end }}

{{/*
The variables whose value the relay reads from a file (their *_FILE twin):
the secret variables of internal/cli (redact tag). values.schema.json lists
the same names, and the chart's check keeps both in step with the binary.
*/}}
{{- define "outbox-relay.fileVariables" -}}
DATABASE_URL NATS_URL WEBHOOK_URL WEBHOOK_SECRET KAFKA_SASL_PASSWORD RABBITMQ_URL PUBSUB_CREDENTIALS REDIS_URL REDIS_PASSWORD OTEL_EXPORTER_OTLP_HEADERS RELAY_CONSOLE_SECRET
{{- end }}

{{/* Refuses values that the relay would refuse at start, or that the chart owns. */}}
{{- define "outbox-relay.validate" -}}
{{- $fileVars := splitList " " (include "outbox-relay.fileVariables" .) }}
{{- $keys := .Values.secret.keys | default dict }}
{{- if and $keys (not .Values.secret.name) }}
{{- fail "secret.keys is set but secret.name is empty: name the Secret that holds the keys" }}
{{- end }}
{{- range $var, $key := $keys }}
{{- if not (has $var $fileVars) }}
{{- fail (printf "secret.keys.%s: the relay reads only %s from files" $var (join ", " $fileVars)) }}
{{- end }}
{{- if hasKey $.Values.env $var }}
{{- fail (printf "%s is set both in env and in secret.keys: the relay refuses both; keep the secret" $var) }}
{{- end }}
{{- end }}
{{- $owned := list "RELAY_DRAIN_TIMEOUT" }}
{{- range $var, $key := $keys }}
{{- $owned = append $owned (printf "%s_FILE" $var) }}
{{- end }}
{{- range $var := $owned }}
{{- if hasKey $.Values.env $var }}
{{- fail (printf "env.%s is set by the chart (drainTimeoutSeconds, secret.keys): remove it from env" $var) }}
{{- end }}
{{- end }}
{{- range $e := .Values.extraEnv }}
{{- if has $e.name $owned }}
{{- fail (printf "extraEnv %s is set by the chart (drainTimeoutSeconds, secret.keys): remove it" $e.name) }}
{{- end }}
{{- if hasKey $.Values.env $e.name }}
{{- fail (printf "%s is set both in env and in extraEnv" $e.name) }}
{{- end }}
{{- if hasKey $keys $e.name }}
{{- fail (printf "%s is set both in extraEnv and in secret.keys: the relay refuses both; keep the secret" $e.name) }}
{{- end }}
{{- end }}
{{- end }}
