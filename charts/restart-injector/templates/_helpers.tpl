{{/*
The chart's name (nameOverride): the app.kubernetes.io/name label of the
webhook's objects and their selectors.
*/}}
{{- define "restart-injector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name of the webhook's objects: fullnameOverride, else the release name
when it contains the chart's name (restart-injector, the name deploy/ uses),
else <release>-<name>. 63 characters at most: the Service's name is a DNS
label.
*/}}
{{- define "restart-injector.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "restart-injector.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The labels every object of the release carries (Helm's and Kubernetes'
recommended ones). Call with (dict "name" NAME "ctx" $).
*/}}
{{- define "restart-injector.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The webhook's labels. */}}
{{- define "restart-injector.webhookLabels" -}}
{{- include "restart-injector.labels" (dict "name" (include "restart-injector.name" .) "ctx" .) -}}
{{- end -}}

{{/*
The selector of the webhook's pods: the name label alone, as deploy/ selects
them (a Deployment's selector cannot change after its creation).
*/}}
{{- define "restart-injector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "restart-injector.name" . }}
{{- end -}}

{{/*
An image reference: repository@digest when a digest is set, else
repository:tag, the tag defaulting to the chart's appVersion. With
global.imageRegistry, the repository's registry (its first part, when that
names a host: a dot, a port or localhost) is replaced by it, or put in
front when it names none, as charts that take a mirror do. Call with
(dict "image" .Values.image "chart" .Chart "global" .Values.global).
*/}}
{{- define "restart-injector.imageRef" -}}
{{- $repo := .image.repository -}}
{{- with (.global | default dict).imageRegistry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default .chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The webhook's namespace: namespace.name, else the release's. */}}
{{- define "restart-injector.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{/* Where the API server calls the webhook: the Service, path /mutate. */}}
{{- define "restart-injector.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "restart-injector.fullname" . }}
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
{{- with .Values.webhook.objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What every webhook entry shares besides rules and matchConditions. */}}
{{- define "restart-injector.webhookCommon" -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ .Values.webhook.failurePolicy }}
# Another webhook that adds or rewrites containers after this one gets them
# wrapped too; the injector is idempotent, so a second call on an injected pod
# changes nothing.
reinvocationPolicy: IfNeeded
# Covers a registry lookup (bounded by --lookup-timeout, 5 s); cached lookups
# and pods with command answer in well under a millisecond.
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
{{ include "restart-injector.clientConfig" . }}
{{- end -}}

{{/*
The node agent's namespace: nodeAgent.namespace, else <the webhook's
namespace>-node-agent (restart-supervisor-node-agent beside
restart-supervisor, as deploy/ has it). Not the webhook's own: the agent's
hostPath needs the privileged Pod Security level, the webhook's namespace is
meant to enforce restricted.
*/}}
{{- define "restart-injector.nodeAgentNamespace" -}}
{{- .Values.nodeAgent.namespace | default (printf "%s-node-agent" (include "restart-injector.namespace" .) | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{/*
The name of the node agent's objects: restart-supervisor-node-agent for the
default full name (as deploy/ names them), else <fullname>-node-agent. Their
app.kubernetes.io/name label stays restart-supervisor-node-agent whatever the
name: `restart-injector status` finds the agent's pods by it.
*/}}
{{- define "restart-injector.nodeAgentName" -}}
{{- $full := include "restart-injector.fullname" . -}}
{{- if eq $full .Chart.Name -}}
restart-supervisor-node-agent
{{- else -}}
{{- printf "%s-node-agent" $full | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The node agent's labels. */}}
{{- define "restart-injector.nodeAgentLabels" -}}
{{- include "restart-injector.labels" (dict "name" "restart-supervisor-node-agent" "ctx" .) -}}
{{- end -}}

{{/*
The webhook's ServiceAccount: serviceAccount.name, else the full name.
With serviceAccount.create false the chart makes none and binds this name.
*/}}
{{- define "restart-injector.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "restart-injector.fullname" .) -}}
{{- end -}}

{{/*
The groups of files/prometheus-rules.yaml as prometheusRule's values tune
them. The file stays the one source (deploy/components/prometheus-rule holds
the same groups, and promtool tests the file as it is), so the values are
applied to its parsed rules, not templated into it: the selectors of the
webhook's Deployment and the agent's DaemonSet take this release's
namespaces and names, clusterLabel joins every "by (" and "on (", a rule's
runbook_url moves to runbookBaseURL, alertLabels are added under its own
labels, and alerts.<name> disables a rule or sets its for and severity. An
unknown name in alerts fails, so that a typo never leaves an alert as it
was.
*/}}
{{- define "restart-injector.prometheusRules" -}}
{{- $cfg := .Values.prometheusRule -}}
{{- $doc := .Files.Get "files/prometheus-rules.yaml" | fromYaml -}}
{{- $runbook := "https://github.com/restart-supervisor/restart-supervisor/blob/main/docs/observability.md" -}}
{{- $injector := printf "namespace=%q, deployment=%q" (include "restart-injector.namespace" .) (include "restart-injector.fullname" .) -}}
{{- $agent := printf "namespace=%q, daemonset=%q" (include "restart-injector.nodeAgentNamespace" .) (include "restart-injector.nodeAgentName" .) -}}
{{- $known := dict -}}
{{- $groups := list -}}
{{- range $g := $doc.groups -}}
{{- $rules := list -}}
{{- range $r := $g.rules -}}
{{- $_ := set $known $r.alert true -}}
{{- $o := get ($cfg.alerts | default dict) $r.alert | default dict -}}
{{- if not $o.disabled -}}
{{- $expr := $r.expr | replace "namespace=\"restart-supervisor\", deployment=\"restart-injector\"" $injector | replace "namespace=\"restart-supervisor-node-agent\", daemonset=\"restart-supervisor-node-agent\"" $agent -}}
{{- if $cfg.clusterLabel -}}
{{- $expr = $expr | replace "by (" (printf "by (%s, " $cfg.clusterLabel) | replace "on (" (printf "on (%s, " $cfg.clusterLabel) -}}
{{- end -}}
{{- $_ := set $r "expr" $expr -}}
{{- with $o.for -}}
{{- $_ := set $r "for" . -}}
{{- end -}}
{{- $labels := merge (deepCopy ($r.labels | default dict)) ($cfg.alertLabels | default dict) -}}
{{- with $o.severity -}}
{{- $_ := set $labels "severity" . -}}
{{- end -}}
{{- $_ := set $r "labels" $labels -}}
{{- $ann := $r.annotations | default dict -}}
{{- $_ := set $ann "runbook_url" ($ann.runbook_url | replace $runbook ($cfg.runbookBaseURL | default $runbook)) -}}
{{- $rules = append $rules $r -}}
{{- end -}}
{{- end -}}
{{- if $rules -}}
{{- $groups = append $groups (dict "name" $g.name "rules" $rules) -}}
{{- end -}}
{{- end -}}
{{- range $name, $_ := ($cfg.alerts | default dict) -}}
{{- if not (hasKey $known $name) -}}
{{- fail (printf "prometheusRule.alerts.%s: no such alert (the alerts are %s)" $name (keys $known | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}
