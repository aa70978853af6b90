"""What tests/unit/test_crd.py and tests/component/test_crd.py share."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT
from tritonpipeline.kube.api_client import Kube, KubeError

GROUP = "serving.tritonpipeline.io"


API = f"{GROUP}/v1alpha1"


KIND = "TritonPipeline"


def refused(kube: Kube, obj: dict[str, Any]) -> str:
    """Server-side apply must be refused at admission (422); returns the server's message."""
    with pytest.raises(KubeError) as info:
        kube.apply(obj)
    assert info.value.status == 422, str(info.value)
    meta = obj["metadata"]
    assert kube.get(API, KIND, meta["namespace"], meta["name"]) is None, "a refused object was stored"
    return str(info.value)


# --- 2. bad objects are refused at admission, the message naming the field and the reason ----------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation of the object at a dotted path ('spec.models.0.name'); value ... deletes the key."""

    def mutate(doc: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = doc
        for part in head:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if value is ...:
            del node[key]
        else:
            node[key] = value

    return mutate


def _all(*mutations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        for m in mutations:
            m(doc)

    return mutate


# --- 2b. admission and the spec's validators agree, value by value ---------------------------------

GATEWAY = {"sessionAffinity": "Header", "provider": "gateway-api"}


SEQ = "spec.models.1.sequenceBatching"


KEPT_STATE = {"inputName": "S_IN", "outputName": "S_OUT", "dataType": "FP32", "dims": [1]}


INITIAL = {"name": "start", "dataType": "FP32", "dims": [1]}


ZERO_INITIAL = INITIAL | {"zeroData": True}


INSTANCE = {"kind": "CPU", "count": 1}


STATE = {"inputName": "S_IN", "outputName": "S_OUT", "dataType": "FP32", "dims": [0]}


OK = ("", "")


OTLP = "http://otel-collector.observability.svc:4318/v1/traces"  # an OpenTelemetry collector


S3_URI = "s3://bucket/models"


CA = {"name": "store-ca"}  # key: ca.crt by default


# (id, example, mutation, (field path, words) in both refusals; OK where both admit the value).
# Each CEL rule of the CRD has rows on both of its sides (test_every_cel_rule_has_rows_on_both_sides);
# patterns and list limits at and past their edge.
AGREEMENT: list[tuple[str, str, Callable[[dict[str, Any]], None], tuple[str, str]]] = [
    (
        "dim-zero",
        "fanout",
        _set("spec.models.0.inputs.0.dims", [0]),
        ("spec.models[0].inputs[0].dims[0]", "not 0"),
    ),
    ("dim-any-and-positive", "fanout", _set("spec.models.0.inputs.0.dims", [-1, 3]), OK),
    # the largest integers: int32 and uint32 fields at their type's, 64-bit ones at 2^53 - 1 (a float64
    # holds the apiserver's bound exactly to there), on both sides of the edge
    ("dim-at-the-largest-exact", "fanout", _set("spec.models.0.inputs.0.dims", [(1 << 53) - 1]), OK),
    (
        "dim-past-the-largest-exact",
        "fanout",
        _set("spec.models.0.inputs.0.dims", [1 << 53]),
        ("spec.models[0].inputs[0].dims[0]", "9007199254740991"),
    ),
    (
        "queue-delay-at-the-largest-exact",
        "fanout",
        _set("spec.models.0.dynamicBatching.maxQueueDelayMicroseconds", (1 << 53) - 1),
        OK,
    ),
    (
        "queue-delay-past-the-largest-exact",
        "fanout",
        _set("spec.models.0.dynamicBatching.maxQueueDelayMicroseconds", 1 << 53),
        ("spec.models[0].dynamicBatching.maxQueueDelayMicroseconds", "9007199254740991"),
    ),
    (
        "candidate-sequences-at-int32",
        "streaming",
        _set(SEQ, {"strategy": "oldest", "maxCandidateSequences": (1 << 31) - 1}),
        OK,
    ),
    (
        "candidate-sequences-past-int32",
        "streaming",
        _set(SEQ, {"strategy": "oldest", "maxCandidateSequences": 1 << 31}),
        ("spec.models[1].sequenceBatching.maxCandidateSequences", "2147483647"),
    ),
    (
        "queue-size-past-uint32",
        "fanout",
        _set("spec.models.0.dynamicBatching.defaultQueuePolicy", {"maxQueueSize": 1 << 32}),
        ("spec.models[0].dynamicBatching.defaultQueuePolicy.maxQueueSize", "4294967295"),
    ),
    ("pipeline-dim-zero", "fanout", _set("spec.pipelines.0.inputs.0.dims", [4, 0]), ("dims[1]", "not 0")),
    ("state-dim-zero", "streaming", _set(f"{SEQ}.states", [STATE]), ("states[0].dims[0]", "not 0")),
    (
        "controls-same-name",
        "streaming",
        _set(f"{SEQ}.controls.end", "START"),
        ("controls", "different names"),
    ),
    (
        "controls-ready-corrid",
        "streaming",
        _set(f"{SEQ}.controls.ready", "CORRID"),
        ("controls", "different"),
    ),
    ("controls-distinct", "streaming", _set(f"{SEQ}.controls.ready", "READY"), OK),
    ("controls-one-set", "streaming", _set(f"{SEQ}.controls", {"start": "START"}), OK),
    ("direct-with-queue-delay", "streaming", _set(f"{SEQ}.maxQueueDelayMicroseconds", 100), OK),
    ("direct-with-slot-utilization", "streaming", _set(f"{SEQ}.minimumSlotUtilization", 0.5), OK),
    (
        "direct-with-preserve-ordering",
        "streaming",
        _set(f"{SEQ}.preserveOrdering", True),
        ("spec.models[1].sequenceBatching", "only apply to strategy 'oldest'"),
    ),
    (
        "oldest-with-slot-utilization",
        "streaming",
        _set(SEQ, {"strategy": "oldest", "preserveOrdering": True, "minimumSlotUtilization": 0.5}),
        ("spec.models[1].sequenceBatching", "minimumSlotUtilization only applies to strategy 'direct'"),
    ),
    ("direct-with-empty-preferred", "streaming", _set(f"{SEQ}.preferredBatchSizes", []), OK),
    (
        "oldest-with-candidates",
        "streaming",
        _all(_set(f"{SEQ}.strategy", "oldest"), _set(f"{SEQ}.maxCandidateSequences", 4)),
        OK,
    ),
    (
        "backend-and-platform",
        "fanout",
        _set("spec.models.0.platform", "onnxruntime_onnx"),
        ("spec.models[0]", "exactly one of backend"),
    ),
    (
        "platform-only",
        "fanout",
        _all(_set("spec.models.0.backend", ...), _set("spec.models.0.platform", "onnxruntime_onnx")),
        OK,
    ),
    ("neither", "fanout", _set("spec.models.0.backend", ...), ("spec.models[0]", "exactly one of backend")),
    (
        "dynamic-and-sequence",
        "fanout",
        _set("spec.models.0.sequenceBatching", {}),
        ("spec.models[0]", "cannot both be set"),
    ),
    (
        "sequence-only",
        "fanout",
        _all(_set("spec.models.0.dynamicBatching", ...), _set("spec.models.0.sequenceBatching", {})),
        OK,
    ),
    (
        "gateway-api-without-gateway",
        "streaming",
        _set("spec.routing", GATEWAY),
        ("spec.routing.gateway", "needs routing.gateway"),
    ),
    (
        "gateway-api-with-gateway",
        "streaming",
        _set("spec.routing", {**GATEWAY, "gateway": {"name": "gw"}}),
        OK,
    ),
    ("gateway-api-no-header-affinity", "fanout", _set("spec.routing", {"provider": "gateway-api"}), OK),
    (
        "header-affinity-empty-header",
        "streaming",
        _set("spec.routing.header", ""),
        ("spec.routing.header", ""),
    ),
    (
        "min-above-max",
        "fanout",
        _set("spec.autoscaling", {"minReplicas": 3, "maxReplicas": 2}),
        ("spec.autoscaling.minReplicas", "minReplicas must be <= maxReplicas"),
    ),
    ("min-equals-max", "fanout", _set("spec.autoscaling", {"minReplicas": 2, "maxReplicas": 2}), OK),
    ("default-min-and-max-1", "fanout", _set("spec.autoscaling", {"maxReplicas": 1}), OK),
    (
        "metadata-name-leading-digit",
        "fanout",
        _set("metadata.name", "9vision"),
        ("metadata.name", "DNS-1035 label"),
    ),
    ("metadata-name-63", "fanout", _set("metadata.name", "v" * 63), OK),
    ("headless-name-too-long", "streaming", _set("metadata.name", "s" * 55), ("metadata.name", "-headless")),
    ("headless-name-at-limit", "streaming", _set("metadata.name", "s" * 54), OK),
    # patterns and limits the schema takes from the spec's types
    ("tensor-name-exported", "fanout", _set("spec.models.0.inputs.0.name", "onnx::Gemm_0"), OK),
    ("tensor-name-256", "fanout", _set("spec.models.0.inputs.0.name", "t" * 256), OK),
    (
        "tensor-name-257",
        "fanout",
        _set("spec.models.0.inputs.0.name", "t" * 257),
        ("spec.models[0].inputs[0].name", ""),
    ),
    ("model-name-slash", "fanout", _set("spec.models.0.name", "a/b"), ("spec.models[0].name", "")),
    ("host-wildcard", "streaming", _set("spec.routing.host", "*.example.com"), OK),
    ("host-uppercase", "streaming", _set("spec.routing.host", "Example.com"), ("spec.routing.host", "")),
    (
        "prometheus-not-http",
        "fanout",
        _set("spec.autoscaling", {"maxReplicas": 2, "prometheusAddress": "ftp://p"}),
        ("spec.autoscaling.prometheusAddress", ""),
    ),
    ("mig-resource", "fanout", _set("spec.server.gpuResource", "nvidia.com/mig-1g.10gb"), OK),
    ("instance-groups-16", "fanout", _set("spec.models.0.instances", [INSTANCE] * 16), OK),
    (
        "instance-groups-17",
        "fanout",
        _set("spec.models.0.instances", [INSTANCE] * 17),
        ("spec.models[0].instances", ""),
    ),
    ("replicas-1000", "fanout", _set("spec.server.replicas", 1000), OK),
    ("replicas-1001", "fanout", _set("spec.server.replicas", 1001), ("spec.server.replicas", "")),
    (
        "s3-options-on-s3",
        "fanout",
        _set("spec.modelRepository", {"uri": S3_URI, "s3": {"region": "eu-west-1"}}),
        OK,
    ),
    (
        "s3-options-on-gs",
        "fanout",
        _set("spec.modelRepository", {"uri": "gs://bucket/models", "s3": {"region": "eu-west-1"}}),
        ("spec.modelRepository.s3", "applies to s3:// sources only"),
    ),
    ("gcs-options-on-gs", "fanout", _set("spec.modelRepository", {"uri": "gs://bucket/m", "gcs": {}}), OK),
    (
        "gcs-options-on-s3",
        "fanout",
        _set("spec.modelRepository", {"uri": S3_URI, "gcs": {}}),
        ("spec.modelRepository.gcs", "applies to gs:// sources only"),
    ),
    (
        "s3-ca-twice",
        "fanout",
        _set("spec.modelRepository", {"uri": S3_URI, "s3": {"caSecretRef": CA, "caConfigMapRef": CA}}),
        ("spec.modelRepository.s3.caConfigMapRef", "give the CA bundle once"),
    ),
    (
        "rollout-and-strategy",
        "fanout",
        _set("spec.server", {"rollout": "ReplaceInPlace", "strategy": {"type": "Recreate"}}),
        ("spec.server.rollout", "set one of rollout and strategy"),
    ),
    ("rollout-alone", "fanout", _set("spec.server", {"rollout": "ReplaceInPlace"}), OK),
    (
        "s3-ca-over-http",
        "fanout",
        _set(
            "spec.modelRepository",
            {"uri": S3_URI, "s3": {"endpoint": "http://minio:9000", "caSecretRef": CA}},
        ),
        ("spec.modelRepository.s3.endpoint", "needs an https:// endpoint"),
    ),
    (
        "priorities-with-a-default-level",
        "fanout",
        _set("spec.models.0.dynamicBatching", {"priorityLevels": 3, "defaultPriorityLevel": 2}),
        OK,
    ),
    (
        "priorities-without-a-default-level",
        "fanout",
        _set("spec.models.0.dynamicBatching", {"priorityLevels": 3}),
        ("spec.models[0].dynamicBatching", "defaultPriorityLevel must be one of the levels"),
    ),
    (
        "default-level-above-the-levels",
        "fanout",
        _set("spec.models.0.dynamicBatching", {"priorityLevels": 2, "defaultPriorityLevel": 3}),
        ("spec.models[0].dynamicBatching", "defaultPriorityLevel must be one of the levels"),
    ),
    (
        "queue-policy-of-a-level-that-exists",
        "fanout",
        _set(
            "spec.models.0.dynamicBatching",
            {
                "priorityLevels": 2,
                "defaultPriorityLevel": 1,
                "priorityQueuePolicies": [{"priorityLevel": 2, "maxQueueSize": 4, "timeoutAction": "DELAY"}],
            },
        ),
        OK,
    ),
    (
        "queue-policy-of-a-level-that-does-not",
        "fanout",
        _set(
            "spec.models.0.dynamicBatching",
            {"priorityLevels": 2, "defaultPriorityLevel": 1, "priorityQueuePolicies": [{"priorityLevel": 3}]},
        ),
        ("spec.models[0].dynamicBatching", "each priorityQueuePolicies[].priorityLevel must be one of"),
    ),
    (
        "ordered-with-one-level-and-a-rejecting-policy",
        "fanout",
        _set(
            "spec.models.0.dynamicBatching",
            {
                "preserveOrdering": True,
                "priorityLevels": 1,
                "defaultPriorityLevel": 1,
                "defaultQueuePolicy": {"timeoutAction": "REJECT", "defaultTimeoutMicroseconds": 100},
                "priorityQueuePolicies": [{"priorityLevel": 1, "timeoutAction": "DELAY"}],
            },
        ),
        OK,
    ),
    (
        "ordered-with-two-levels",
        "fanout",
        _set(
            "spec.models.0.dynamicBatching",
            {"preserveOrdering": True, "priorityLevels": 2, "defaultPriorityLevel": 1},
        ),
        ("spec.models[0].dynamicBatching", "preserveOrdering allows one priority level at most"),
    ),
    (
        "ordered-with-a-delaying-level",
        "fanout",
        _set(
            "spec.models.0.dynamicBatching",
            {
                "preserveOrdering": True,
                "priorityLevels": 1,
                "defaultPriorityLevel": 1,
                "priorityQueuePolicies": [
                    {"priorityLevel": 1, "timeoutAction": "DELAY", "defaultTimeoutMicroseconds": 5}
                ],
            },
        ),
        ("spec.models[0].dynamicBatching", "preserveOrdering takes no queue policy with timeoutAction DELAY"),
    ),
    (
        "ordered-with-a-delaying-default",
        "fanout",
        _set(
            "spec.models.0.dynamicBatching",
            {
                "preserveOrdering": True,
                "defaultQueuePolicy": {"timeoutAction": "DELAY", "defaultTimeoutMicroseconds": 5},
            },
        ),
        ("spec.models[0].dynamicBatching", "preserveOrdering takes no queue policy with timeoutAction DELAY"),
    ),
    (
        "instance-group-settings",
        "fanout",
        _set(
            "spec.models.0.instances",
            [
                {
                    "kind": "GPU",
                    "profile": ["0", "12"],
                    "hostPolicy": "numa0",
                    "rateLimiter": {"resources": [{"name": "R", "global": True, "count": 2}], "priority": 3},
                },
                {"kind": "GPU", "passive": True},
            ],
        ),
        OK,
    ),
    (
        "version-policy-latest",
        "fanout",
        _set("spec.models.0.versionPolicy", {"policy": "latest", "numVersions": 2}),
        OK,
    ),
    (
        "version-policy-specific-without-versions",
        "fanout",
        _set("spec.models.0.versionPolicy", {"policy": "specific"}),
        ("spec.models[0].versionPolicy", "versions (at least one) with policy specific only"),
    ),
    (
        "version-policy-all-with-num-versions",
        "fanout",
        _set("spec.models.0.versionPolicy", {"policy": "all", "numVersions": 2}),
        ("spec.models[0].versionPolicy", "numVersions goes with policy latest"),
    ),
    (
        "initial-state-zero",
        "streaming",
        _set("spec.models.1.sequenceBatching.states", [KEPT_STATE | {"initialState": ZERO_INITIAL}]),
        OK,
    ),
    (
        "initial-state-zero-and-file",
        "streaming",
        _set(
            "spec.models.1.sequenceBatching.states",
            [KEPT_STATE | {"initialState": INITIAL | {"zeroData": True, "dataFile": "s.bin"}}],
        ),
        (
            "spec.models[1].sequenceBatching.states[0].initialState",
            "set exactly one of zeroData: true or dataFile",
        ),
    ),
    (
        "initial-state-neither",
        "streaming",
        _set("spec.models.1.sequenceBatching.states", [KEPT_STATE | {"initialState": INITIAL}]),
        (
            "spec.models[1].sequenceBatching.states[0].initialState",
            "set exactly one of zeroData: true or dataFile",
        ),
    ),
    (
        "s3-ca-over-https",
        "fanout",
        _set(
            "spec.modelRepository",
            {"uri": S3_URI, "s3": {"endpoint": "https://minio:9000", "caConfigMapRef": CA}},
        ),
        OK,
    ),
    # spec.server.tracing (Triton's --trace-config)
    (
        "tracing-opentelemetry",
        "fanout",
        _set("spec.server.tracing", {"url": OTLP, "resource": {"a": "b"}}),
        OK,
    ),
    (
        "tracing-triton-file",
        "fanout",
        _set(
            "spec.server.tracing", {"mode": "triton", "level": ["TIMESTAMPS", "TENSORS"], "logFrequency": 5}
        ),
        OK,
    ),
    ("tracing-triton-off", "fanout", _set("spec.server.tracing", {"mode": "triton", "level": ["OFF"]}), OK),
    (
        "tracing-url-with-triton",
        "fanout",
        _set("spec.server.tracing", {"mode": "triton", "url": OTLP}),
        ("spec.server.tracing.url", "applies to mode opentelemetry only"),
    ),
    (
        "tracing-resource-with-triton",
        "fanout",
        _set("spec.server.tracing", {"mode": "triton", "resource": {"a": "b"}}),
        ("spec.server.tracing.resource", "applies to mode opentelemetry only"),
    ),
    (
        "tracing-log-frequency-with-opentelemetry",
        "fanout",
        _set("spec.server.tracing", {"logFrequency": 1}),
        ("spec.server.tracing.logFrequency", "applies to mode triton only"),
    ),
    (
        "tracing-tensors-with-opentelemetry",
        "fanout",
        _set("spec.server.tracing", {"level": ["TENSORS"]}),
        ("spec.server.tracing.level", "mode opentelemetry traces TIMESTAMPS only"),
    ),
    (
        "tracing-off-with-another-level",
        "fanout",
        _set("spec.server.tracing", {"mode": "triton", "level": ["TIMESTAMPS", "OFF"]}),
        ("spec.server.tracing.level", "each level once, and OFF alone"),
    ),
    (
        "tracing-a-level-twice",
        "fanout",
        _set("spec.server.tracing", {"mode": "triton", "level": ["TENSORS", "TENSORS"]}),
        ("spec.server.tracing.level", "each level once, and OFF alone"),
    ),
    ("tracing-rate-0", "fanout", _set("spec.server.tracing", {"rate": 0}), ("spec.server.tracing.rate", "")),
    (
        "tracing-url-not-http",
        "fanout",
        _set("spec.server.tracing", {"url": "collector:4318"}),
        ("spec.server.tracing.url", ""),
    ),
]


def load_example(path: Path, namespace: str, name: str | None = None) -> dict[str, Any]:
    """examples/<x>.yaml as a cluster object: a pvc:// model repository and a namespace."""
    doc = yaml.safe_load(path.read_text())
    doc["metadata"] = {"name": name or doc["metadata"]["name"], "namespace": namespace}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    return copy.deepcopy(doc)


def example(source: str, namespace: str, name: str = "subject") -> dict[str, Any]:
    return load_example(ROOT / "examples" / f"{source}.yaml", namespace, name)
