"""The schema of a TritonPipeline's status, which render/crd.py puts in the CRD: every field the operator
writes (render/conditions.py's conditions, reconcile/status_writer.py's replica counts,
reconcile/pipeline.py's observedGeneration, endpoint and graph, reconcile/live.py's steps, bottleneck,
branch traffic, autoscaler and open sequences), typed and bounded like the spec's, so that no writer of
the status subresource stores anything deeper or larger than that: the API server prunes a field the
schema does not have and refuses a value out of bounds (issue 54). kopf writes nothing there: its
progress and diff base are annotations (handlers.py) and no handler returns a result.

The bounds are the largest the operator can write for a spec the CRD admits, so its own status is never
refused; free text (messages, the router choice's reason, a branch's condition) it cuts to
render/conditions.py's MAX_MESSAGE. A bound is left generous where a later release may write more (types
and reasons of conditions, the messages), since an older CRD would refuse that release's whole status
write, not prune the field."""

from __future__ import annotations

from typing import Any

import annotated_types as at

from ..compiler.branches import MAX_PART_NAME
from ..compiler.plan import MAX_ROUTER_NAME
from ..spec import MAX_PIPELINES, MAX_STEPS, MAX_TENSOR_NAME, MAX_TENSORS
from ..spec.server import Server
from .conditions import MAX_CONDITIONS

# a pipeline, step or model name (spec/base.py NAME_RE, MODEL_NAME_RE)
MAX_NAME = 64
# a tensor reference: `STEP.TENSOR`, `inputs.NAME` or `outputs.NAME`
MAX_REFERENCE = MAX_NAME + 1 + MAX_TENSOR_NAME
# where in the spec a condition is declared: `spec.pipelines[I].switch[K].cases[C]`, `....steps[J].when`
MAX_SPEC_PATH = 128
# a Kubernetes object name (a pod's): a DNS subdomain
MAX_OBJECT_NAME = 253
# host:port (NAME.NAMESPACE.svc:8001 today)
MAX_ENDPOINT = MAX_OBJECT_NAME + len(":65535")
# a word the operator chooses (a router backend, a fan-out mode, an autoscaling metric): strings, not
# enums, so that a newer release's word is not refused by an older CRD
MAX_WORD = 63
# free text: metav1.Condition's bound, 32 times what the operator writes (render/conditions.py MAX_MESSAGE)
MAX_TEXT = 32768
# metav1.Condition's bounds and patterns for a condition's type and reason
MAX_CONDITION_TYPE = 316
CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
MAX_REASON = 1024
REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
MAX_TIMESTAMP = 64  # RFC 3339 with nanoseconds is 35

# list bounds, from the spec's: status.steps has one entry per step of every pipeline
MAX_STEP_ENTRIES = MAX_PIPELINES * MAX_STEPS
# the consumers of one pipeline's tensors: every input of every step (a step maps at most its model's
# inputs, MAX_TENSORS) and every pipeline output; a router serves a tensor with two consumers or more
MAX_CONSUMERS = (MAX_STEPS + 1) * MAX_TENSORS
MAX_PIPELINE_ROUTERS = MAX_CONSUMERS // 2
MAX_ROUTERS = MAX_PIPELINES * MAX_PIPELINE_ROUTERS
# an ensemble's steps: the user's and the routers inserted for it
MAX_ENSEMBLE_STEPS = MAX_STEPS + MAX_PIPELINE_ROUTERS


def _most_replicas() -> int:
    """spec.server.replicas' upper bound."""
    found = [m.le for m in Server.model_fields["replicas"].metadata if isinstance(m, at.Le)]
    (most,) = [le for le in found if isinstance(le, int)]
    return most


# status.openSequences has one entry per Ready pod: at most server.replicas (autoscaling.maxReplicas has the
# same bound) and as many again while a rollout surges; render/triton_metrics.py lists no more (a pod of
# someone else's that carries the pipeline's label would count)
MAX_POD_ENTRIES = 2 * _most_replicas()


def _string(most: int, description: str = "", **extra: Any) -> dict[str, Any]:
    schema = {"type": "string", "maxLength": most, **extra}
    return {**schema, "description": description} if description else schema


def _count(description: str = "") -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "format": "int64", "minimum": 0}
    return {**schema, "description": description} if description else schema


def _list(items: dict[str, Any], most: int, description: str) -> dict[str, Any]:
    return {"type": "array", "maxItems": most, "items": items, "description": description}


def _object(description: str, required: list[str] | None = None, **props: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "description": description, "properties": props}
    return {**schema, "required": required} if required else schema


CONDITION = _object(
    "One aspect of the pipeline, in the Kubernetes style: its type, True/False/Unknown and why.",
    ["type", "status"],
    type=_string(MAX_CONDITION_TYPE, "SpecValid, Ready, Progressing, ...", pattern=CONDITION_TYPE),
    status={"type": "string", "enum": ["True", "False", "Unknown"]},
    reason=_string(MAX_REASON, "A CamelCase word that says why.", pattern=REASON),
    message=_string(MAX_TEXT, "What happened, for people."),
    observedGeneration=_count("The spec generation the condition is about."),
    lastTransitionTime=_string(MAX_TIMESTAMP, "When status last changed.", format="date-time"),
)

STEP = _object(
    "A step the user wrote and its model's work during the last poll interval.",
    ["pipeline", "step", "model"],
    pipeline=_string(MAX_NAME),
    step=_string(MAX_NAME),
    model=_string(MAX_NAME),
    queueUs=_count("Average microseconds a request queued."),
    computeUs=_count("Average microseconds a request computed."),
    requestsPerSecond={"type": "number", "minimum": 0},
)

ENSEMBLE = _object(
    "An ensemble the compiler generated for a pipeline.",
    name=_string(MAX_NAME),
    maxBatchSize=_count(),
    fanOut=_string(MAX_WORD),
    steps=_list(_string(max(MAX_NAME, MAX_ROUTER_NAME)), MAX_ENSEMBLE_STEPS, "Its steps and routers."),
)

ROUTER = _object(
    "A router inserted to copy one tensor to each of its consumers.",
    name=_string(MAX_ROUTER_NAME),
    pipeline=_string(MAX_NAME),
    source=_string(MAX_REFERENCE),
    consumers=_list(_string(MAX_REFERENCE), MAX_CONSUMERS, "STEP.INPUT or outputs.NAME, in order."),
    backend=_string(MAX_WORD),
)


def _rate(description: str) -> dict[str, Any]:
    return {"type": "number", "minimum": 0, "description": description}


def _branches(description: str, **more: dict[str, Any]) -> dict[str, Any]:
    """A pipeline's branches (each the steps that share one condition: a `when`, or a case of a switch):
    the ensemble serving it (compiler/branches.py names it PIPELINE__when<k>, at most MAX_PART_NAME
    long), its condition in words and its steps, and `more`."""
    branch = _object(
        description,
        ["model", "condition", "steps"],
        model=_string(
            max(MAX_NAME, MAX_PART_NAME),
            "The ensemble the compiler generated for the branch (PIPELINE__when<k>).",
        ),
        condition=_string(
            MAX_TEXT,
            "When a request takes the branch, as the spec says it: `classify.LABEL equals 0`, a switch's "
            "default `no case of the switch on classify.LABEL holds`.",
        ),
        steps=_list(_string(MAX_NAME), MAX_STEPS, "The steps the branch runs, as the spec names them."),
        **more,
    )
    return _list(branch, MAX_STEPS, "In the order the orchestrator calls them.")


CONDITIONS = _object(
    "A pipeline with conditions: the branches its orchestrator (a model named after the pipeline) calls.",
    ["pipeline", "branches"],
    pipeline=_string(MAX_NAME),
    exclusive={
        "type": "boolean",
        "description": "No request can take two branches (the cases of one switch, or comparisons of one "
        "tensor that no value satisfies together): status.branchTraffic then counts the inferences that "
        "took none.",
    },
    speculative={
        "type": "boolean",
        "description": "Every branch runs for every request, beside the steps without a condition, and the "
        "switch keeps the answers of the branches taken (the spec's speculative, on the native switch); "
        "status.branchTraffic counts the requests that took each.",
    },
    branches=_branches(
        "One branch: the steps that share one condition (a `when`, or a case of a switch).",
        declaredAt=_string(
            MAX_SPEC_PATH, "Where the condition is declared: spec.pipelines[0].steps[1].when."
        ),
    ),
)

BRANCH_TRAFFIC = _object(
    "A pipeline with conditions and the inferences each branch took.",
    ["pipeline", "branches"],
    pipeline=_string(MAX_NAME),
    inferences=_count("The pipeline's: every inference it answered."),
    noBranch=_count(
        "Inferences that took no branch (a switch without a default, a value no `when` names): the "
        "pipeline's less its branches'; only where no request can take two branches (graph.conditions' "
        "exclusive)."
    ),
    inferencesPerSecond=_rate("The pipeline's, over the last poll interval."),
    branches=_branches(
        "One branch (as in graph.conditions) and its inferences.",
        inferences=_count("Inferences that took the branch."),
        inferencesPerSecond=_rate("Over the last poll interval."),
    ),
)

GRAPH = _object(
    "What the compiler generated: the ensembles, the routers inserted for them and what they run on.",
    ensembles=_list(ENSEMBLE, MAX_PIPELINES, "One per pipeline."),
    routers=_list(ROUTER, MAX_ROUTERS, "Every router inserted."),
    conditions=_list(CONDITIONS, MAX_PIPELINES, "Per pipeline with conditions: its branches."),
    routerBackend=_object(
        "What the routers run on and why, when the operator chose.",
        backend=_string(MAX_WORD),
        reason=_string(MAX_TEXT),
    ),
)


def status_schema() -> dict[str, Any]:
    """The CRD's `status`: typed and bounded at every level; no field keeps whatever is sent."""
    return _object(
        "Written by the operator alone (docs/how-to/status.md).",
        observedGeneration=_count("The spec generation the operator last handled."),
        conditions={
            **_list(CONDITION, MAX_CONDITIONS, "Conditions by type."),
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        replicas=_count("The Deployment's pods."),
        readyReplicas=_count("The Deployment's ready pods."),
        endpoint=_string(MAX_ENDPOINT, "The gRPC endpoint in the cluster: host:port."),
        graph=GRAPH,
        steps=_list(STEP, MAX_STEP_ENTRIES, "Per step: queue and compute time per request, requests/s."),
        bottleneck=_string(2 * MAX_NAME + 1, "pipeline/step with the most queue + compute time per request."),
        branchTraffic=_list(
            BRANCH_TRAFFIC,
            MAX_PIPELINES,
            "Per pipeline with conditions: the inferences it answered and each branch took, from Triton's "
            "own counters (nv_inference_count: one per batch item, so a request of one item is one "
            "inference) of its orchestrator and of each branch's ensemble (a speculative pipeline's "
            "switch counts the rows taking each branch, as tritonpipeline_branch_taken), summed over the "
            "Ready pods, each counting since it started; written by the status poll when a number changed "
            "(docs/concepts/conditions.md).",
        ),
        autoscaler=_object(
            "The autoscaler's replicas, the metric and the target it scales on, and its engine.",
            currentReplicas=_count(),
            desiredReplicas=_count(),
            metric=_string(MAX_WORD),
            target={"type": "number", "minimum": 0},
            engine=_string(
                MAX_WORD,
                "hpa or keda: what scales the pipeline (`auto` resolved; the condition "
                "AutoscalingConfigured says why).",
            ),
        ),
        openSequences=_list(
            _object(
                "A Ready pod and the sequences open on it.",
                ["pod"],
                pod=_string(MAX_OBJECT_NAME),
                openSequences=_count(),
            ),
            MAX_POD_ENTRIES,
            "With routing.sessionAffinity Stream: per Ready pod, the sequences open on it.",
        ),
    )
