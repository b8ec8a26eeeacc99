{{/*
An image reference: repository:tag, the tag defaulting to the chart's
appVersion. Call with (dict "image" .Values.image "chart" .Chart).
*/}}
{{- define "restart-injector.imageRef" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .chart.AppVersion) -}}
{{- end -}}

{{/* The webhook's namespace. */}}
{{- define "restart-injector.namespace" -}}
{{- .Values.namespace.name -}}
{{- end -}}

{{/* Where the API server calls the webhook: the Service, path /mutate. */}}
{{- define "restart-injector.clientConfig" -}}
clientConfig:
  service:
    name: restart-injector
    namespace: {{ include "restart-injector.namespace" . }}
    path: /mutate
    port: 443
{{- end -}}

{{/*
The namespaceSelector of every webhook entry: never the system namespaces and
the webhook's own; with namespaceSelector.optIn only namespaces labelled
restart-supervisor.dev/inject=enabled.
*/}}
{{- define "restart-injector.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ concat .Values.namespaceSelector.excluded (list (include "restart-injector.namespace" .)) | toJson }}
  {{- if .Values.namespaceSelector.optIn }}
  - key: restart-supervisor.dev/inject
    operator: In
    values: [enabled]
  {{- end }}
  {{- with .Values.namespaceSelector.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* What every webhook entry shares besides rules and matchConditions. */}}
{{- define "restart-injector.webhookCommon" -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: Fail
# Another webhook that adds or rewrites containers after this one gets them
# wrapped too; the injector is idempotent, so a second call on an injected pod
# changes nothing.
reinvocationPolicy: IfNeeded
# Covers a registry lookup (bounded by --lookup-timeout, 5 s); cached lookups
# and pods with command answer in well under a millisecond.
timeoutSeconds: 10
matchPolicy: Equivalent
{{ include "restart-injector.clientConfig" . }}
{{- end -}}

{{/* The node agent's namespace. */}}
{{- define "restart-injector.nodeAgentNamespace" -}}
{{- .Values.nodeAgent.namespace -}}
{{- end -}}
