{{/*
Expand the name of the chart.
*/}}
{{- define "triton-pipeline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name (63 characters at most: some Kubernetes name fields are
limited to this by the DNS naming spec). If the release name contains the chart name it is used as is.
*/}}
{{- define "triton-pipeline.fullname" -}}
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

{{/*
Chart name and version as used by the helm.sh/chart label.
*/}}
{{- define "triton-pipeline.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels (immutable in a Deployment: never add to these). The name is NAME-operator, not NAME:
the Triton pods the operator creates carry app.kubernetes.io/name=triton-pipeline and
app.kubernetes.io/instance=PIPELINE, so a pipeline named like this release would otherwise select the
operator pod into its Service.
*/}}
{{- define "triton-pipeline.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-operator" (include "triton-pipeline.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Common labels.
*/}}
{{- define "triton-pipeline.labels" -}}
helm.sh/chart: {{ include "triton-pipeline.chart" . }}
{{ include "triton-pipeline.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: triton-pipeline
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The name of the operator's ServiceAccount.
*/}}
{{- define "triton-pipeline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "triton-pipeline.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image reference: repository@digest, or repository:tag (tag defaults to appVersion).
*/}}
{{- define "triton-pipeline.image" -}}
{{- $repo := .Values.image.repository | trim }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}
{{- end }}

{{/*
The init container image that assembles model repositories: assemblerImage, else the assembler image
(the Dockerfile's target `assembler`) beside the operator's: its repository with the suffix -assembler,
at the same tag (validate refuses an empty assemblerImage with image.digest: a digest is one image's).
*/}}
{{- define "triton-pipeline.assemblerImage" -}}
{{- if .Values.assemblerImage }}
{{- .Values.assemblerImage }}
{{- else }}
{{- printf "%s-assembler:%s" (.Values.image.repository | trim) (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}
{{- end }}

{{/*
Refuse values that cannot work, with a message that says what to change. Included by every template
that depends on them, so `helm template`, `helm lint` and `helm install` all stop here.
*/}}
{{- define "triton-pipeline.validate" -}}
{{- $fullname := include "triton-pipeline.fullname" . }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname) }}
{{- fail (printf "the release name makes the name %q, which Services cannot take (a DNS-1035 label: lowercase letters, digits and '-', starting with a letter; Kubernetes 1.28 refuses a leading digit, every release a dot): choose another release name or set fullnameOverride" $fullname) }}
{{- end }}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/part-of" "app.kubernetes.io/managed-by" "app.kubernetes.io/version" "helm.sh/chart" }}
{{- if or (hasKey ($.Values.commonLabels | default dict) $key) (hasKey ($.Values.podLabels | default dict) $key) }}
{{- fail (printf "commonLabels and podLabels may not set %s: the chart sets it (a second value would be a duplicate key, and one of the Deployment's selector labels would no longer match its pods)" $key) }}
{{- end }}
{{- end }}
{{- if lt (int .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount must be at least 1, got %v (2, the default, keeps the webhook and the reconciler up while a pod restarts)" .Values.replicaCount) }}
{{- end }}
{{- if not (.Values.image.repository | trim) }}
{{- fail "image.repository must not be empty" }}
{{- end }}
{{- if and (not .Values.image.digest) (not (default .Chart.AppVersion .Values.image.tag | toString | trim)) }}
{{- fail "image.tag is empty and the chart has no appVersion: set image.tag or image.digest" }}
{{- end }}
{{- if and .Values.image.digest (not .Values.assemblerImage) }}
{{- fail (printf "image.digest pins the operator image only: set assemblerImage too, the assembler image by digest (%s-assembler@sha256:...), or the operator image's reference to run both from it" (.Values.image.repository | trim)) }}
{{- end }}
{{- if and .Values.rbac.clusterWide .Values.watchNamespaces }}
{{- fail (printf "watchNamespaces %v conflicts with rbac.clusterWide=true: a ClusterRole would grant every namespace while the operator watches only these; set rbac.clusterWide=false for per-namespace Roles, or empty watchNamespaces to watch all" .Values.watchNamespaces) }}
{{- end }}
{{- if and (not .Values.rbac.clusterWide) (not .Values.watchNamespaces) }}
{{- fail "rbac.clusterWide=false needs watchNamespaces (the namespaces to grant and watch); with an empty list the operator would watch all namespaces without permission to" }}
{{- end }}
{{- if eq (int .Values.operator.port) (int .Values.operator.metricsPort) }}
{{- fail (printf "operator.port and operator.metricsPort are both %v: the liveness and the metrics endpoints need a port each" .Values.operator.port) }}
{{- end }}
{{- if and .Values.metrics.operatorServiceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "metrics.operatorServiceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor scrapes the operator through that Service" }}
{{- end }}
{{- if and .Values.webhook.enabled (or (eq (int .Values.webhook.port) (int .Values.operator.port)) (eq (int .Values.webhook.port) (int .Values.operator.metricsPort))) }}
{{- fail (printf "webhook.port %v is also the liveness or metrics port (operator.port, operator.metricsPort): the webhook needs a port of its own" .Values.webhook.port) }}
{{- end }}
{{- if and .Values.webhook.certManager.enabled (not .Values.webhook.enabled) }}
{{- fail "webhook.certManager.enabled needs webhook.enabled: the certificate is for the webhook" }}
{{- end }}
{{- with .Values.webhook.certManager.issuerRef }}
{{- if not (and .name .kind) }}
{{- fail "webhook.certManager.issuerRef needs name and kind (Issuer or ClusterIssuer), or leave it empty for the chart's self-signed Issuer" }}
{{- end }}
{{- end }}
{{- if and .Values.networkPolicy.enabled .Values.metrics.operatorServiceMonitor.enabled (not .Values.networkPolicy.metricsFrom) }}
{{- fail "metrics.operatorServiceMonitor.enabled with networkPolicy.enabled needs networkPolicy.metricsFrom (your Prometheus's namespace or pods): the NetworkPolicy would keep Prometheus from the operator's metrics" }}
{{- end }}
{{- $stopping := add (include "triton-pipeline.preStopSeconds" . | int) 5 }}
{{- if lt (int .Values.terminationGracePeriodSeconds) $stopping }}
{{- fail (printf "terminationGracePeriodSeconds %v is too short: the pod's %ss preStop sleep (while the webhook Service drops it) comes out of it, then the operator needs a few seconds to stop its handlers and leave kopf's peering (killed instead, the next pod waits operator.peeringLifetimeSeconds); set at least %v" .Values.terminationGracePeriodSeconds (include "triton-pipeline.preStopSeconds" .) $stopping) }}
{{- end }}
{{- range $name := list "serviceMonitor" "operatorServiceMonitor" }}
{{- $monitor := index $.Values.metrics $name }}
{{- if $monitor.enabled }}
{{- $interval := include "triton-pipeline.durationMs" $monitor.interval | int64 }}
{{- if le $interval 0 }}
{{- fail (printf "metrics.%s.interval is %q: a scrape interval must be longer than 0 (30s, 1m30s)" $name $monitor.interval) }}
{{- end }}
{{- if gt (include "triton-pipeline.durationMs" $monitor.scrapeTimeout | int64) $interval }}
{{- fail (printf "metrics.%s.scrapeTimeout %q is longer than its interval %q: Prometheus refuses a scrape timeout greater than the scrape interval; shorten the timeout or lengthen the interval" $name $monitor.scrapeTimeout $monitor.interval) }}
{{- end }}
{{- end }}
{{- end }}
{{- if ne (len (.Values.watchNamespaces | default list)) (len (uniq (.Values.watchNamespaces | default list))) }}
{{- fail (printf "watchNamespaces has duplicates: %v" .Values.watchNamespaces) }}
{{- end }}
{{- end }}

{{/*
How long a stopping operator pod keeps serving (its preStop sleep) while the webhook Service's
endpoints drop it (docs/how-to/operate.md).
*/}}
{{- define "triton-pipeline.preStopSeconds" -}}
5
{{- end }}

{{/*
A Prometheus duration (values.schema.json checks its form: 1h, 1m30s, 500ms) in milliseconds. In the
alternation ms comes before m and s, so 5ms is five milliseconds, not five minutes and an s.
*/}}
{{- define "triton-pipeline.durationMs" -}}
{{- $factors := dict "y" 31536000000 "w" 604800000 "d" 86400000 "h" 3600000 "m" 60000 "s" 1000 "ms" 1 }}
{{- $total := 0 }}
{{- range $part := regexFindAll "[0-9]+(ms|y|w|d|h|m|s)" (toString .) -1 }}
{{- $count := regexFind "^[0-9]+" $part }}
{{- $total = add $total (mul (int64 $count) (index $factors (trimPrefix $count $part))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
The operator's permissions inside a namespace (or in all of them), derived from the calls it makes:
  - kopf lists and watches TritonPipelines and patches them (its progress annotations);
    the operator reads one with GET (status writes are read-modify-write) and lists them (resync);
  - status is written with a merge PATCH on the status subresource (never read through it);
  - kopf.info / kopf.warn POST Events (kopf never patches or reads them);
  - children are written with server-side apply (PATCH) naming the child's UID, so it reaches only the
    object the pipeline controls; a child that does not exist is created (POST: create) and another's
    object of a child's name is left alone. Whose an object is, is read (GET) when the operator does
    not know the child's UID yet (after a start, or when the object was replaced): `get` on every kind
    it writes (render/ownership.py, reconcile/claim.py). kopf watches some kinds by label (on.event
    handlers: list + watch);
  - only surplus ConfigMap parts and children a spec no longer renders are ever deleted (prune), and
    only those the pipeline controls (a DELETE with the child's UID as its precondition): a
    dropped HPA or ScaledObject, and routing objects (the headless Service, Ingresses, DestinationRule,
    HTTPRoute/GRPCRoute, Envoy Gateway's BackendTrafficPolicy, NGINX Gateway Fabric's
    UpstreamSettingsPolicy) when session affinity, its provider or the Gateway's implementation changes.
    Nothing else is;
  - a pipeline's Gateway and its GatewayClass are read (GET, cluster-wide: a Gateway usually lives in a
    namespace of its own; see kopf-clusterrole.yaml) to learn which implementation hashes the header;
  - routing and KEDA objects are not watched (the resync loop repairs them), so they need no list/watch;
    whether their API exists is read from discovery, which every authenticated user may read. KEDA's
    ScaledObjects only where the operator may use KEDA (autoscaling.keda: "triton-pipeline.keda" below);
  - children carry owner references with blockOwnerDeletion: true, which the
    OwnerReferencesPermissionEnforcement admission plugin (on by default in OpenShift) allows only to
    whoever may update the owner's finalizers: `update` on tritonpipelines/finalizers (no finalizer is
    ever written);
  - a Deployment is read (GET) when a pipeline gets an autoscaler, to hand its replica count over;
  - ReplicaSets are listed (by the pipeline's label) before generated ConfigMaps are pruned: those the
    pods of a kept ReplicaSet mount stay (the ConfigMaps are immutable and named by their content);
  - the model claim of a pvc:// repository is read (GET) for its access modes (ModelSource condition).
  - Secrets: create only. The operator POSTs each pipeline's admin-key Secret (a random key) once and
    takes "already exists" as done; it never gets, lists, watches, patches or deletes a Secret, so it
    cannot read any key, the generated ones included (the pipeline's ownerReference lets the garbage
    collector delete it). RBAC cannot narrow create by name (the name is not known at authorisation
    time), so this is the narrowest grant. A pipeline's secretRef and adminKeySecretRef are read by
    the kubelet for its pods, never by the operator;
  - NetworkPolicies (spec.networkPolicy) are applied and pruned like the routing objects, and watched
    by label like the other children (a resync sends only what changed: it compares with the watch);
  - PodDisruptionBudgets (every pipeline that runs pods) likewise.
  - kopf's peering (the replicas agree which one reconciles, docs/how-to/operate.md): its
    ClusterKopfPeering (cluster-wide) or KopfPeering (per watched namespace) is listed and watched by
    every replica, and only the release's own object is read (get, the operator's standby check) and
    patched (each replica's keep-alive entry); the objects are the chart's (peering.yaml).
  - Pods: list + watch (kopf watches the Triton pods by label): their status (a failed init container's
    message, a stuck image pull, an unschedulable pod) goes into the pipeline's Ready condition. Never
    written, never exec'd, no logs.
*/}}
{{- define "triton-pipeline.rules" -}}
- apiGroups: ["serving.tritonpipeline.io"]
  resources: ["tritonpipelines"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["serving.tritonpipeline.io"]
  resources: ["tritonpipelines/status"]
  verbs: ["patch"]
- apiGroups: ["serving.tritonpipeline.io"]
  resources: ["tritonpipelines/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["networking.istio.io"]
  resources: ["destinationrules"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes", "grpcroutes"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["gateway.envoyproxy.io"]
  resources: ["backendtrafficpolicies"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["gateway.nginx.org"]
  resources: ["upstreamsettingspolicies"]
  verbs: ["get", "create", "patch", "delete"]
{{- if include "triton-pipeline.keda" . }}
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["get", "create", "patch", "delete"]
{{- end }}
{{- end }}

{{/*
"true" where the operator may use KEDA (autoscaling.keda): always, never, or (auto) where helm's API
versions include KEDA's ScaledObject. The ScaledObject rules above and TRITONPIPELINE_USE_KEDA follow it.
*/}}
{{- define "triton-pipeline.keda" -}}
{{- $keda := toString .Values.autoscaling.keda }}
{{- if or (eq $keda "true") (and (eq $keda "auto") (.Capabilities.APIVersions.Has "keda.sh/v1alpha1/ScaledObject")) }}true{{ end }}
{{- end }}

{{/*
kopf's peering rules for one kind (ClusterKopfPeering or KopfPeering): watched, and the release's own
object read and patched (see "rules" above).
*/}}
{{- define "triton-pipeline.peeringRules" -}}
- apiGroups: ["kopf.dev"]
  resources: [{{ .resource | quote }}]
  verbs: ["list", "watch"]
- apiGroups: ["kopf.dev"]
  resources: [{{ .resource | quote }}]
  resourceNames: [{{ .name | quote }}]
  verbs: ["get", "patch"]
{{- end }}

{{/*
The names of a list of {name: ...} pull secrets, comma-separated (TRITONPIPELINE_ASSEMBLER_IMAGE_PULL_REFS).
*/}}
{{- define "triton-pipeline.pullSecretNames" -}}
{{- $names := list -}}
{{- range . }}{{ $names = append $names .name }}{{ end -}}
{{- join "," $names -}}
{{- end }}

{{/*
The webhook's Service (and, with cert-manager, its Certificate and Secret): RELEASE-triton-pipeline-webhook.
*/}}
{{/*
The operator's metrics Service (a Service name is a DNS-1035 label: 63 characters at most).
*/}}
{{- define "triton-pipeline.metricsService" -}}
{{- printf "%s-metrics" (include "triton-pipeline.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "triton-pipeline.webhookService" -}}
{{- printf "%s-webhook" (include "triton-pipeline.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Secret holding the key that signs the pipelines' access review records (TRITONPIPELINE_REVIEW_KEY_STORE).
*/}}
{{- define "triton-pipeline.reviewKeySecret" -}}
{{- printf "%s-review-key" (include "triton-pipeline.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Secret the operator replicas share the self-signed webhook certificate in (TRITONPIPELINE_WEBHOOK_SHARED_CERT).
*/}}
{{- define "triton-pipeline.webhookCertSecret" -}}
{{- printf "%s-cert" (include "triton-pipeline.webhookService" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Where cert-manager's Secret is mounted in the operator pod (TRITONPIPELINE_WEBHOOK_CERT_DIR).
*/}}
{{- define "triton-pipeline.webhookCertDir" -}}
/etc/tritonpipeline/webhook-tls
{{- end }}

{{/*
Every address of the pod, as a URL writes it: what the operator's endpoints bind (operator.ipFamily).
With IPv6, [::] also takes IPv4 where the kernel allows (net.ipv6.bindv6only 0, the default).
*/}}
{{- define "triton-pipeline.anyAddress" -}}
{{- if eq .Values.operator.ipFamily "IPv6" }}[::]{{ else }}0.0.0.0{{ end }}
{{- end }}

{{/*
"true" where the platform assigns the pods' user and group ids (security.adaptSecurityContext): forced,
or auto on a cluster that serves OpenShift's SecurityContextConstraints.
*/}}
{{- define "triton-pipeline.platformIds" -}}
{{- $mode := .Values.security.adaptSecurityContext }}
{{- if or (eq $mode "force") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "security.openshift.io/v1/SecurityContextConstraints")) }}true{{ end }}
{{- end }}

{{/*
A security context (.context) as YAML, without the ids the platform assigns where it does (platformIds).
*/}}
{{- define "triton-pipeline.securityContext" -}}
{{- $context := .context }}
{{- if include "triton-pipeline.platformIds" .root }}
{{- $context = omit $context "runAsUser" "runAsGroup" "fsGroup" }}
{{- end }}
{{- toYaml $context }}
{{- end }}

{{/*
The PromQL label matchers (no braces) that select this operator's series: prometheusRule.operatorSelector,
else the job and namespace metrics.operatorServiceMonitor gives them (prometheus-operator names the job
after the Service it scrapes).
*/}}
{{- define "triton-pipeline.operatorSelector" -}}
{{- if .Values.prometheusRule.operatorSelector | default "" | trim }}
{{- .Values.prometheusRule.operatorSelector | default "" | trim }}
{{- else }}
{{- printf "job=%q,namespace=%q" (include "triton-pipeline.metricsService" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
A number as PromQL reads it: an integral one without a fraction or an exponent (Go prints a float64
of a million as 1e+06).
*/}}
{{- define "triton-pipeline.number" -}}
{{- if eq (float64 .) (float64 (int64 .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/*
Refuse alert settings that cannot work (prometheusrule.yaml): every window must hold two scrapes of what
it reads (rate() and increase() need two samples), and the operator's series must be findable.
*/}}
{{- define "triton-pipeline.validateAlerts" -}}
{{- $rule := .Values.prometheusRule }}
{{- if not (or $rule.pipelineNotReady.enabled $rule.queueTime.enabled $rule.reconcileErrors.enabled $rule.loopStalled.enabled) }}
{{- fail "prometheusRule.enabled with every alert off (pipelineNotReady, queueTime, reconcileErrors, loopStalled) would render an empty rule group: enable one or set prometheusRule.enabled=false" }}
{{- end }}
{{- if and (not ($rule.operatorSelector | default "" | trim)) (not .Values.metrics.operatorServiceMonitor.enabled) (or $rule.pipelineNotReady.enabled $rule.reconcileErrors.enabled $rule.loopStalled.enabled) }}
{{- fail "prometheusRule reads the operator's own metrics: enable metrics.operatorServiceMonitor (the alerts then select its job and namespace), or set prometheusRule.operatorSelector to the label matchers your Prometheus gives the operator's series (e.g. job=\"triton-pipeline\",namespace=\"ops\")" }}
{{- end }}
{{- $checks := list (list "queueTime" $rule.queueTime .Values.metrics.serviceMonitor "metrics.serviceMonitor") (list "reconcileErrors" $rule.reconcileErrors .Values.metrics.operatorServiceMonitor "metrics.operatorServiceMonitor") (list "loopStalled" $rule.loopStalled .Values.metrics.operatorServiceMonitor "metrics.operatorServiceMonitor") }}
{{- range $check := $checks }}
{{- $name := index $check 0 }}
{{- $alert := index $check 1 }}
{{- $monitor := index $check 2 }}
{{- $window := include "triton-pipeline.durationMs" $alert.window | int64 }}
{{- if and $alert.enabled (le $window 0) }}
{{- fail (printf "prometheusRule.%s.window is %q: a window must be longer than 0 (5m, 1h)" $name $alert.window) }}
{{- end }}
{{- if and $alert.enabled $monitor.enabled (lt $window (mul 2 (include "triton-pipeline.durationMs" $monitor.interval | int64))) }}
{{- fail (printf "prometheusRule.%s.window %q holds fewer than two scrapes of %s.interval %q: rate() and increase() need two samples, so the alert could never fire; lengthen the window to at least twice the interval" $name $alert.window (index $check 3) $monitor.interval) }}
{{- end }}
{{- end }}
{{- end }}
