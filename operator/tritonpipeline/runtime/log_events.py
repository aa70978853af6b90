"""Every line the operator logs, in one place: a named `LogEvent` each, with its level, its message
template (str.format, named fields) and when it appears. The call sites log `EVENT.log(logger, **fields)`;
docs/reference/log-events.md is generated from this module (tools/reference.py). kopf's own lines
(`Handler 'on_create' succeeded.`, ...) are not here.

Lines about one pipeline carry its `[namespace/name]` (`--log-format full` and `plain`) or its
`object` (`json`): the call sites log them on the pipeline's logger."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

Logger = logging.Logger | logging.LoggerAdapter[Any]


@dataclass(frozen=True)
class LogEvent:
    """One kind of log line: `template` rendered with named fields, logged at `level`."""

    name: str  # the constant's name in this module
    level: int  # logging.INFO, ...
    template: str  # str.format with named fields
    explanation: str  # when it appears, what it means, what to do
    traceback: bool = False  # logged with the current exception's traceback

    def format(self, **fields: Any) -> str:
        """The line's message."""
        return self.template.format(**fields)

    def log(self, logger: Logger, /, **fields: Any) -> None:
        """Log the line on `logger` (a pipeline's, for lines about one) at this event's level."""
        if self.traceback:  # only then: a record's exc_info stays None, as logger.info leaves it
            logger.log(self.level, self.format(**fields), exc_info=True, stacklevel=2)
        else:
            logger.log(self.level, self.format(**fields), stacklevel=2)

    @property
    def level_name(self) -> str:
        return logging.getLevelName(self.level)


# optional parts of OPERATOR_STARTED and METRICS_UNREADABLE (empty when they do not apply)
STARTED_METRICS = "; /metrics and /readyz at {url}"
STARTED_PEERING = "; replica {identity} in peering {peering!r}"
STARTED_PLATFORM_IDS = "; the platform assigns the Triton pods' user and group ids"
MORE_PODS = " (and {count} more pods)"
# the end of RECONCILE_INVALID: whether a Deployment of an earlier generation keeps serving
INVALID_KEPT = "last good deployment kept"
INVALID_NOTHING = "nothing deployed yet"

# AUTHORS_NOT_REVIEWED's reason
NO_REVIEW = (
    "TRITONPIPELINE_REVIEW_AUTHORS is off, so whoever may create a TritonPipeline gets every object and "
    "reference it asks for"
)
NO_REVIEW_WEBHOOK = (
    "the admission webhook is off, so only what the admin lists allow (TRITONPIPELINE_TRUSTED_KINDS and "
    "the others) is made"
)

# start-up and leadership

OPERATOR_STARTED = LogEvent(
    "OPERATOR_STARTED",
    logging.INFO,
    "tritonpipeline operator: watching {scope}; init image {image}{metrics}{peering}{ids}",
    "The operator started: the namespaces it watches (`all namespaces` without `-n` or "
    "TRITONPIPELINE_NAMESPACES) and the assembler image; `{metrics}` is `; /metrics and /readyz at URL` "
    "with `--metrics`, `{peering}` is `; replica ID in peering 'NAME'` with TRITONPIPELINE_PEERING, "
    "`{ids}` is `; the platform assigns the Triton pods' user and group ids` where "
    "TRITONPIPELINE_ADAPT_SECURITY_CONTEXT is `force`, or `auto` on OpenShift.",
)
REPLICA_ACTIVE = LogEvent(
    "REPLICA_ACTIVE",
    logging.INFO,
    "replica {identity} is now the active reconciler",
    "With several replicas (peering): this one is now the oldest live replica, so it reconciles; the "
    "others are standby.",
)
REPLICA_STANDBY = LogEvent(
    "REPLICA_STANDBY",
    logging.INFO,
    "replica {identity} is standby (it serves the webhook); active: {active}",
    "With several replicas: another replica (named) reconciles; this one serves the admission webhook "
    "and takes over when the active one's peering entry expires. Logged at start and on every change.",
)

# reconciles of a pipeline: exactly one outcome line each (RECONCILE_DONE, RECONCILE_INVALID or
# RECONCILE_ERROR), the same outcome as the tritonpipeline_operator_reconciles_total metric counts

RECONCILE_DONE = LogEvent(
    "RECONCILE_DONE",
    logging.INFO,
    "reconcile {outcome} (generation {generation}): {summary}",
    "The outcome line of a reconcile that applied the pipeline's children: `created` (every child "
    "was new: how many and which), `updated` (which objects were created, updated or pruned), "
    "`unchanged` (nothing changed and the pods are ready) or `waiting` (nothing changed, pods not all "
    "ready); any outcome ends with `waiting for pods (ready/desired ready)` while they are not.",
)
RECONCILE_INVALID = LogEvent(
    "RECONCILE_INVALID",
    logging.WARNING,
    "reconcile invalid (generation {generation}): {error}; {kept}",
    "The outcome line of a reconcile whose spec was refused: the first error with its field path; "
    "nothing was changed. `{kept}` is `last good deployment kept` where an earlier generation's "
    "children keep serving, `nothing deployed yet` where none was ever valid. Every problem is in the "
    "SpecValid condition and at DEBUG; fix the spec (`tritonpipeline validate` shows the same errors).",
)
RECONCILE_ERROR = LogEvent(
    "RECONCILE_ERROR",
    logging.ERROR,
    "reconcile error (generation {generation}): apply failed, retried in {retry}s: {error}",
    "The outcome line of a reconcile whose apply failed (an API call was refused or did not answer); "
    "kopf retries it after `{retry}` seconds: 10 after no answer; after a refusal (an admission policy, "
    "a quota, a field the cluster does not know) 10, doubled at each refusal of the same spec up to 600, "
    "and the resync leaves the pipeline alone meanwhile (a change of the spec is tried at once). A "
    "refusal is also in status: UpToDate=False with reason ApplyRefused, and a Warning event when it is "
    "new. Persistent errors: check the operator's RBAC and the API server.",
)
RECONCILE_PROBLEMS = LogEvent(
    "RECONCILE_PROBLEMS",
    logging.DEBUG,
    "every problem of generation {generation}: {problems}",
    "With `--verbose`, after RECONCILE_INVALID: every problem of the refused spec on one line.",
)
RECONCILE_DETAILS = LogEvent(
    "RECONCILE_DETAILS",
    logging.DEBUG,
    "applied {objects} objects ({configmaps} ConfigMaps, repository {digest}, routers: {routers}); "
    "pruned {pruned}; autoscaling: {autoscaling}",
    "With `--verbose`, before the outcome line: what the reconcile applied, the generated repository's "
    "digest, the inserted routers, what it pruned and the autoscaling it rendered.",
)
NAMESPACE_DELETING = LogEvent(
    "NAMESPACE_DELETING",
    logging.INFO,
    "namespace {namespace} is being deleted: generation {generation} is not applied",
    "The pipeline's namespace is terminating, which deletes the pipeline and its children: nothing "
    "is applied or restored (counted as `unchanged`).",
)
ADMIN_SECRET_CREATED = LogEvent(
    "ADMIN_SECRET_CREATED",
    logging.INFO,
    "created Secret {secret} holding the admin key",
    "The operator created the Secret with the pipeline's Triton admin key (its value is never logged), "
    "because the spec names no `server.adminKeySecretRef`.",
)
ADMIN_KEY_ROLL = LogEvent(
    "ADMIN_KEY_ROLL",
    logging.WARNING,
    "Secret {secret} was missing and holds a new admin key: restarting the pods of Deployment {deployment} "
    "so that every pod takes it",
    "The pipeline's generated admin-key Secret was deleted while its pods ran; the operator made a new "
    "key and restarts the pods (a rolling update: the pod template's annotation "
    "`serving.tritonpipeline.io/admin-key-created`), since each pod reads the key once, when it starts. "
    "Clients of the admin APIs read the key from the Secret again.",
)
DRAIN_REPLACING = LogEvent(
    "DRAIN_REPLACING",
    logging.INFO,
    "node {node} is being drained and holds pod {pod}, the only ready replica: restarting the pods of "
    "Deployment {deployment}, a new pod first",
    "`kubectl drain` (or a cluster upgrade, an autoscaler's scale-down) cordoned the node of the pipeline's "
    "only ready pod, which its PodDisruptionBudget keeps from eviction. The operator restarts the pods (a "
    "rolling update that surges: the pod template's annotation `serving.tritonpipeline.io/"
    "replaces-drained-pod`): the new pod starts on another node, the old one goes once it is Ready, and "
    "the drain completes. Where the new pod cannot be scheduled, Progressing says DrainWaiting and why.",
)
DRAIN_RESTART_REFUSED = LogEvent(
    "DRAIN_RESTART_REFUSED",
    logging.WARNING,
    "node {node} is being drained and holds pod {pod}, the only ready replica; restarting the pods of "
    "Deployment {deployment} was refused: {error}",
    "As DRAIN_REPLACING, but the API server (an admission policy, say) refused the restart; the drain "
    "waits, and the operator tries again at the pipeline's next status pass (its next resync at the latest).",
)
NODE_UNREADABLE = LogEvent(
    "NODE_UNREADABLE",
    logging.WARNING,
    "cannot read node {node} (is it being drained?): {error}; a drain of it waits for pod {pod}",
    "The operator reads the node of a pipeline's only ready pod to see whether it is being drained (`get` "
    "on nodes, in the chart's ClusterRole `<release>-triton-pipeline-kopf`). Without it a drain of that "
    "node waits until the pod is gone some other way. Logged once per node until it is readable again.",
)
POD_SPEC_RESTORED = LogEvent(
    "POD_SPEC_RESTORED",
    logging.WARNING,
    "Deployment {deployment}: the pod spec held what field manager(s) {managers} wrote; replaced by the "
    "rendered one",
    "Another field manager (`kubectl set env`, `kubectl edit`, a patch, another controller) added to the "
    "Triton pods' spec: what it added stays through a server-side apply, so the operator replaced the pod "
    "spec with its own (the pods roll). Change the TritonPipeline instead (`spec.server`: args, resources, "
    "securityContext, ...).",
)
POD_SPEC_NOT_RESTORED = LogEvent(
    "POD_SPEC_NOT_RESTORED",
    logging.WARNING,
    "Deployment {deployment}: the pod spec holds what field manager(s) {managers} wrote, and replacing it "
    "was refused: {error}",
    "As POD_SPEC_RESTORED, but the API server (an admission policy, say) refused the replacement; the rest "
    "of the pipeline was applied, and the next reconcile tries again.",
)
CONDITION_WARNING = LogEvent(
    "CONDITION_WARNING",
    logging.WARNING,
    "{type}={status} ({reason}): {message}",
    "A condition of the pipeline's status needs attention (it is False, such as SessionAffinity=False, "
    "or names a deprecated routing provider): logged and posted as a Warning event on a change of the "
    "spec or when its reason changes; the message says what to change.",
)
NOT_UP_TO_DATE = LogEvent(
    "NOT_UP_TO_DATE",
    logging.INFO,
    "{condition}=False ({reason}): {message}",
    "After an operator upgrade: the pipeline's pods keep an earlier operator's rendering (no restart) "
    "until its spec changes, it is annotated to roll, or TRITONPIPELINE_ROLL_OUTDATED rolls it; the "
    "message says what differs and how to roll.",
)
NEWER_FIELDS_IGNORED = LogEvent(
    "NEWER_FIELDS_IGNORED",
    logging.WARNING,
    "fields of a newer CRD ignored: {fields}",
    "The pipeline holds fields this operator does not know. The API server keeps only fields its CRD "
    "defines, so a newer CRD than this operator's defines them (applied before the operator was upgraded, "
    "or kept after a `helm rollback`); its defaults fill some in on every pipeline. The operator serves "
    "the rest of the spec and leaves them alone (SchemaCurrent=False, FieldsFromNewerSchema); they take "
    "effect once the operator of that CRD's release runs. Logged once per pipeline by each operator "
    "process and again when the fields change, not at every resync.",
)
ROLLING = LogEvent(
    "ROLLING",
    logging.INFO,
    "rolling to this operator's rendering ({rolling} of at most {slots} rolling): it differs in "
    "{differences}",
    "TRITONPIPELINE_ROLL_OUTDATED rolls this outdated pipeline to this operator's rendering now (its "
    "pods restart), at most that many pipelines at a time.",
)
PODS_READY = LogEvent(
    "PODS_READY",
    logging.INFO,
    "pods: {ready}/{replicas} ready (Deployment/{deployment})",
    "The pipeline's ready pods changed (the Deployment's status, mirrored into the pipeline's "
    "status.readyReplicas).",
)
EVENT_NOT_POSTED = LogEvent(
    "EVENT_NOT_POSTED",
    logging.WARNING,
    "cannot post event {reason}: {error}",
    "A Warning event could not be created (RBAC on events, API server): the reconcile goes on, the "
    "status still carries the condition.",
)

# the resync loop and child events

CHILD_RESTORED = LogEvent(
    "CHILD_RESTORED",
    logging.INFO,
    "{kind}/{name} was deleted; restoring it",
    "A child object of the pipeline was deleted by someone else: the operator re-applies the pipeline.",
)
CHILD_DRIFTED = LogEvent(
    "CHILD_DRIFTED",
    logging.INFO,
    "{kind}/{name} was changed by another writer; re-applying the pipeline",
    "A child's watch showed it different from what the operator applied last (a hand edit, another "
    "controller): the operator re-applies the pipeline at once (at most once every 10 s per pipeline; the "
    "resync catches what this misses).",
)
# REAPPLY_SKIPPED's reason
SKIP_GONE = "the pipeline is gone"
SKIP_DELETING = "the pipeline is being deleted"
SKIP_UNHANDLED = "kopf has not handled its creation yet; its create handler applies it"
SKIP_SUPERSEDED = "this copy (generation {generation}) is older than the one reconciled last ({last})"
SKIP_BACKING_OFF = "the API server refused this spec's objects; tried again in {seconds:.0f}s, or at a change"
REAPPLY_SKIPPED = LogEvent(
    "REAPPLY_SKIPPED",
    logging.INFO,
    "not re-applied: {why}",
    "A re-apply outside the pipeline's own handlers (the resync, a restore, a drift repair, discovery, a "
    "missing admin-key Secret) left the pipeline alone, and says why: it was deleted meanwhile (`the "
    "pipeline is gone`) or is being deleted; kopf's create handler has not run yet (it applies the "
    "pipeline); the resync's copy is older than what a handler reconciled meanwhile; or the API server "
    "refused this spec's objects and its back-off (RECONCILE_ERROR) has not ended. Nothing to do: the "
    "next event or resync tries again.",
)
LIST_FAILED = LogEvent(
    "LIST_FAILED",
    logging.WARNING,
    "{loop}: cannot list pipelines: {error}",
    "The API server refused the resync loop or the status poll the list of the TritonPipelines of a "
    "watched namespace (RBAC?); that namespace is skipped this round. No answer at all (a connection "
    "refused, an overloaded API server) fails the whole pass instead: LOOP_FAILED.",
)
RESYNC_FAILED = LogEvent(
    "RESYNC_FAILED",
    logging.WARNING,
    "resync of this pipeline failed: {error_type}: {error}",
    "The drift repair of one pipeline raised outside its reconcile (reading the pipeline, say): the "
    "resync goes on with the others and repairs this one next period. Report anything but a KubeError.",
)

# the discovery loop (TRITONPIPELINE_DISCOVERY_SECONDS)

DISCOVERY_CHANGED = LogEvent(
    "DISCOVERY_CHANGED",
    logging.INFO,
    "the cluster now serves {served} at {api_version} (before: {before}); re-applying {count} pipeline(s)",
    "API discovery changed for an API the pipelines use (a CRD installed, established or removed: KEDA's "
    "ScaledObject, a routing provider's kinds): the pipelines whose reconciles asked about it are "
    "re-applied at once, so an `auto` autoscaling engine switches to KEDA (or back to the HPA) and a "
    "provider's objects are created. `nothing` is no kind at all.",
)

# the status poll (TRITONPIPELINE_STATUS_POLL_SECONDS)

STATUS_POLL_UNREADABLE = LogEvent(
    "STATUS_POLL_UNREADABLE",
    logging.WARNING,
    "status poll: cannot read the pipeline's pods or autoscaler: {error}",
    "The API server refused the status poll the list of the pipeline's pods or its "
    "HorizontalPodAutoscaler; its status keeps the last numbers until the next poll. No answer at all "
    "fails the whole pass instead: LOOP_FAILED.",
)
METRICS_UNREADABLE = LogEvent(
    "METRICS_UNREADABLE",
    logging.WARNING,
    "status poll: cannot read Triton metrics of pod {pod} on port {port}: {error}{more}; "
    "status.steps leaves those pods out (a NetworkPolicy without the operator as a metrics peer?)",
    "Once, when the Triton metrics of a pipeline's pods stop being readable: status.steps leaves "
    "those pods out. Let the operator's pods reach port 8002 (the chart sets "
    "TRITONPIPELINE_OPERATOR_NAMESPACE and TRITONPIPELINE_OPERATOR_LABELS for the pipeline's "
    "NetworkPolicy).",
)
METRICS_READABLE_AGAIN = LogEvent(
    "METRICS_READABLE_AGAIN",
    logging.INFO,
    "status poll: Triton metrics readable again",
    "After METRICS_UNREADABLE: every ready pod's metrics are read again.",
)
STATUS_POLL_FAILED = LogEvent(
    "STATUS_POLL_FAILED",
    logging.WARNING,
    "status poll failed: {error_type}: {error}",
    "An unexpected error in one pipeline's status poll; the loop goes on with the others and polls "
    "it again next period. Report it if it repeats.",
)

# every loop (runtime/loops.py): resync, status-poll, discovery, leadership, webhook-certificate

LOOP_FAILED = LogEvent(
    "LOOP_FAILED",
    logging.WARNING,
    "{loop} failed ({failures} in a row): {error_type}: {error}; retrying in {retry:.3g}s",
    "A pass of one of the operator's loops raised: `resync` (drift repair), `status-poll`, `discovery` "
    "(reading API discovery: the last answers are kept), `leadership` "
    "(reading the peering object: the replica keeps its last answer, active or standby) or "
    "`webhook-certificate` (reading the shared certificate or its files). `HTTP 0: no answer from the "
    "API server` is a connection refused, reset, cut or timed out. The loop is not over: the pass is "
    "tried again after the time said, doubling from 1 s up to the loop's period. Liveness fails when a "
    "loop has completed no pass for three periods plus TRITONPIPELINE_LOOP_STALE_MARGIN_SECONDS. "
    "Persistent: check the API server and the operator's RBAC; anything but a KubeError is a bug to report "
    "(`--verbose` logs its traceback).",
)
LOOP_FAILED_DETAILS = LogEvent(
    "LOOP_FAILED_DETAILS",
    logging.DEBUG,
    "{loop}: where the pass failed",
    "With `--verbose`, after LOOP_FAILED: the failure's traceback.",
    traceback=True,
)
LOOP_RECOVERED = LogEvent(
    "LOOP_RECOVERED",
    logging.INFO,
    "{loop}: passes complete again after {failures} failures",
    "After LOOP_FAILED: a pass of the loop completed; it goes on at its period.",
)

# the admission webhook (TRITONPIPELINE_WEBHOOK_*)

WEBHOOK_REGISTERED = LogEvent(
    "WEBHOOK_REGISTERED",
    logging.INFO,
    "admission webhook {webhook} registered in ValidatingWebhookConfiguration {configuration!r} "
    "(failurePolicy {failure_policy}, served at {where})",
    "The operator wrote its ValidatingWebhookConfiguration: `kubectl apply` of a TritonPipeline is now "
    "checked by the whole compiler.",
)
WEBHOOK_REGISTER_FAILED = LogEvent(
    "WEBHOOK_REGISTER_FAILED",
    logging.ERROR,
    "cannot register the admission webhook (ValidatingWebhookConfiguration {configuration!r}): {error}; "
    "retrying in {retry:.0f}s",
    "The ValidatingWebhookConfiguration could not be written (RBAC: the chart's webhook ClusterRole "
    "allows exactly that object); the operator keeps reconciling and retries.",
)
WEBHOOK_CERT_ISSUED = LogEvent(
    "WEBHOOK_CERT_ISSUED",
    logging.INFO,
    "admission webhook: new self-signed certificate in {store} ({why})",
    "This replica made a new self-signed CA and serving certificate (none yet, expired or due for "
    "renewal) and stored it for every replica.",
)
WEBHOOK_CERT_STORE_FAILED = LogEvent(
    "WEBHOOK_CERT_STORE_FAILED",
    logging.ERROR,
    "cannot read or write the webhook certificate ({store}): {error}; retrying in {retry:.0f}s",
    "The Secret the replicas share the webhook certificate in could not be read or written (RBAC, "
    "API server); the replica retries.",
)
WEBHOOK_CERT_RELOADED = LogEvent(
    "WEBHOOK_CERT_RELOADED",
    logging.INFO,
    "admission webhook: new connections get the renewed certificate",
    "The webhook server switches to a renewed certificate (renewed here, by another replica, or in "
    "WEBHOOK_CERT_DIR) in place: the listener stays open, connections already open keep theirs.",
)
WEBHOOK_CERT_UNUSABLE = LogEvent(
    "WEBHOOK_CERT_UNUSABLE",
    logging.WARNING,
    "admission webhook: the certificate in {where} does not load ({error}); serving the previous one",
    "The files of WEBHOOK_CERT_DIR changed but do not load as a certificate and its key (caught "
    "between two updates, or a key of another certificate); they are read again at the next check.",
)
COMPILE_STOPPED = LogEvent(
    "COMPILE_STOPPED",
    logging.WARNING,
    "compile of {namespace}/{name} stopped: {why}",
    "A pipeline's compile ran past TRITONPIPELINE_COMPILE_TIMEOUT_SECONDS, or its worker process ended "
    "(killed for memory, say) twice, so the pipeline is refused (at admission, or in status SpecValid). "
    "The operator and the other tenants' compiles go on; a new worker replaces the one that ended.",
)
WEBHOOK_REVIEW_FAILED = LogEvent(
    "WEBHOOK_REVIEW_FAILED",
    logging.ERROR,
    "admission review failed",
    "An unexpected error while checking a TritonPipeline at admission (logged with its traceback): "
    "the request is allowed with a warning and the operator reports any problem in status. Report it.",
    traceback=True,
)

ACCESS_DENIED = LogEvent(
    "ACCESS_DENIED",
    logging.INFO,
    "admission: {user} may not reach {count} thing(s) TritonPipeline {namespace}/{name} asks for; refused",
    "The access review (TRITONPIPELINE_REVIEW_AUTHORS, render/reach.py) found that the author of a new "
    "pipeline or a spec change may not do themselves what the operator would do for them (create an "
    "Ingress, read a Secret...), and no admin list allows it: the write is refused with each field.",
)
AUTHORS_NOT_REVIEWED = LogEvent(
    "AUTHORS_NOT_REVIEWED",
    logging.WARNING,
    "pipeline authors are not reviewed: {why}",
    "At start-up, when the operator cannot ask whether a pipeline's author may reach what it asks for: "
    "TRITONPIPELINE_REVIEW_AUTHORS off (anyone who may create a TritonPipeline gets what it makes, "
    "Secrets of its namespace and Ingresses included), or on without the admission webhook (then only "
    "what the admin lists allow is made). The chart turns both on.",
)


def catalog() -> list[LogEvent]:
    """Every event of this module, in the order declared."""
    return [value for value in globals().values() if isinstance(value, LogEvent)]
