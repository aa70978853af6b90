"""Typed TritonPipeline spec: YAML -> validated, immutable objects with field-path errors.

The one home of the spec's shape: types, enums, bounds, name patterns, list limits, each field's
description, the Rules between one object's fields (and server.gpus against the instance groups' GPU
indices); unknown fields and duplicate YAML keys are refused here too. kube/crd.py generates the CRD from
it (patterns, limits and Rules become the schema and its CEL rules, descriptions what `kubectl explain`
shows), tools/generate.py the README's field reference. The graph's rules (steps, tensors, shapes,
routers) are the compiler's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from . import tritonserver_options
from .errors import Problem, SpecError, quote
from .settings import API_VERSION, KIND

DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:26.08-py3"  # README "Security": why this release
# the NVIDIA device plugin's resource, and the key of the taint GPU nodes usually carry
NVIDIA_GPU = "nvidia.com/gpu"

# Every pattern is applied with fullmatch (a `$` alone lets a trailing newline through in Python) and is
# written in the syntax Python's re and Go's RE2 share: the CRD carries the same strings.
MAX_TENSOR_NAME = 256
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# tensor names come from exported models (input.1, onnx::Gemm_0, /model/embed/input, 1234, input:0) and
# Triton takes any text; only control characters (C0, DEL, C1: Unicode category Cc) are refused
TENSOR_RE = re.compile(r"^[^\x00-\x1f\x7f-\x9f]{1,256}$")
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
K8S_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
BACKEND_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
HEADER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,127}$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
LABEL_NAME_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
HOST_RE = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$")
URL_RE = re.compile(r"^https?://[^\s/$.?#][^\s]*$")
SECRET_KEY_RE = re.compile(r"^[-._A-Za-z0-9]{1,253}$")
REGION_RE = re.compile(r"^[a-z0-9][-a-z0-9]{0,62}$")
RESOURCE_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)

DataType = Literal[
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
    "STRING",
]
URI_SCHEMES = ("pvc", "s3", "gs")
Platform = Literal[
    "tensorrt_plan", "onnxruntime_onnx", "pytorch_libtorch", "tensorflow_savedmodel", "tensorflow_graphdef"
]
AutoscalingMetric = Literal["queueTime", "pendingRequests", "gpuUtilization"]


class FieldProblems(ValueError):
    """Problems a validator found below its own field: (sub-path such as `[2]` or `.gpus[0]`, message).
    Reported at the full field path instead of the validator's."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.items = items
        super().__init__("; ".join(message for _, message in items))


@dataclass(frozen=True)
class Rule:
    """One rule, one home: `holds` for the spec's validators and the same rule in CEL (over `self`) for
    the CRD's x-kubernetes-validations (kube/crd.py), with one message; so `validate`, the operator and
    the apiserver's admission agree (tests/test_crd.py runs a table of values through both).

    A field's rule goes in its type (`Annotated[int, NONZERO_DIM.validator()]`); an object's rules in its
    class's RULES, reported at `field_path` (such as `.minReplicas`) or at the object when empty."""

    holds: Callable[[Any], bool]
    cel: str
    message: str
    field_path: str = ""

    def validator(self) -> Any:
        def check(value: Any) -> Any:
            if not self.holds(value):
                raise ValueError(self.message)
            return value

        check.rule = self  # type: ignore[attr-defined]  # read by the CRD generator
        return AfterValidator(check)

    def cel_rule(self) -> dict[str, str]:
        """The x-kubernetes-validations entry."""
        entry = {"rule": self.cel, "message": self.message}
        return {**entry, "fieldPath": self.field_path} if self.field_path else entry


def _name_rule(pattern: re.Pattern[str], what: str, most: int | None = None) -> Any:
    """A name checked against `pattern`; `most`: the length the pattern allows, also given to the CRD
    as maxLength (the apiserver bounds the cost of CEL rules over strings by it)."""

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"invalid {what} {quote(value)}: {RULE_TEXT[what]}")
        return value

    check.pattern = pattern.pattern  # type: ignore[attr-defined]  # read by the CRD generator
    check.max_length = most  # type: ignore[attr-defined]
    return AfterValidator(check)


RULE_TEXT = {
    "name": "use letters, digits, '_' or '-', start with a letter or '_', at most 64 characters",
    "tensor name": f"any text of 1 to {MAX_TENSOR_NAME} characters without control characters "
    "(such as input.1, onnx::Gemm_0 or /model/embed/input)",
    "backend": "lowercase letters, digits and '_', such as python or onnxruntime",
    "header": "an HTTP header name: letters, digits and '-'",
    "resource name": "a Kubernetes extended resource name with its domain, such as nvidia.com/gpu",
    "object name": "a Kubernetes object name: lowercase letters, digits, '-' and '.'",
    "quantity": "a Kubernetes quantity such as 512Mi, 2Gi or 1.5G",
    "secret key": "a Secret data key: letters, digits, '-', '_' or '.'",
    "region": "a region name such as us-east-1: lowercase letters, digits and '-'",
    "namespace": "a Kubernetes namespace name: lowercase letters, digits and '-'",
    "host": "a DNS host name such as triton.example.com (lowercase; a leading '*.' is allowed)",
    "url": "an http:// or https:// URL such as http://prometheus-operated.monitoring.svc:9090",
    "label key": "a Kubernetes label key such as kubernetes.io/hostname (an optional DNS prefix and '/', "
    "then at most 63 letters, digits, '-', '_' or '.')",
    "label value": "a Kubernetes label value: at most 63 letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit",
    "metadata.name": "a DNS-1035 label: lowercase letters, digits and '-', starting with a letter, "
    "at most 63 characters",
}

Quantity = Annotated[str, _name_rule(QUANTITY_RE, "quantity")]
Name = Annotated[str, _name_rule(NAME_RE, "name")]
TensorName = Annotated[str, _name_rule(TENSOR_RE, "tensor name", most=MAX_TENSOR_NAME)]
NONZERO_DIM = Rule(lambda d: d != 0, "self != 0", "a dimension is -1 (any size) or a positive size, not 0")
Dim = Annotated[int, Field(ge=-1), NONZERO_DIM.validator()]
# the longest lists: bounds the apiserver's cost of the CEL rules over them, and the objects' size
MAX_MODELS, MAX_PIPELINES, MAX_STEPS, MAX_TENSORS, MAX_INSTANCE_GROUPS, MAX_STATES = 256, 64, 128, 64, 16, 16
MAX_DIMS = 8
Dims = Annotated[list[Dim], Field(min_length=1, max_length=MAX_DIMS)]


class _Base(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=False,
        validate_by_alias=True,
    )

    # rules between this object's fields (Rule): checked here and, as CEL, by the apiserver
    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _object_rules(self) -> _Base:
        found = [(rule.field_path, rule.message) for rule in type(self).RULES if not rule.holds(self)]
        if found:
            raise FieldProblems(found)
        return self


Reshape = Annotated[list[Dim], Field(max_length=MAX_DIMS)]
RESHAPE_DESCRIPTION = (
    "Triton's `reshape`: the shape {side} (without the batch dimension), where `dims` is the shape "
    "requests and pipelines see; `[]` is meaningful (one value per batch item). Same number of elements "
    "as `dims`."
)


class InputTensor(_Base):
    name: TensorName = Field(description="Tensor name.")
    data_type: DataType = Field(description="Triton data type.")
    dims: Dims = Field(description="Shape without the batch dimension; `-1` = any size.")
    optional: bool = Field(
        default=False,
        description="Triton's `optional`: requests may leave the input out, and steps may leave it unmapped.",
    )
    format: Literal["NONE", "NHWC", "NCHW"] | None = Field(
        default=None, description="Triton's `format` of an image input (`NHWC`/`NCHW` need 3 dims)."
    )
    reshape: Reshape | None = Field(
        default=None, description=RESHAPE_DESCRIPTION.format(side="the model receives")
    )
    allow_ragged_batch: bool = Field(
        default=False, description="Triton's `allow_ragged_batch`: batch requests of different shapes."
    )
    is_shape_tensor: bool = Field(default=False, description="Triton's `is_shape_tensor` (TensorRT).")


class OutputTensor(_Base):
    name: TensorName = Field(description="Tensor name.")
    data_type: DataType = Field(description="Triton data type.")
    dims: Dims = Field(description="Shape without the batch dimension; `-1` = any size.")
    reshape: Reshape | None = Field(
        default=None, description=RESHAPE_DESCRIPTION.format(side="the model produces")
    )
    label_filename: Annotated[str, Field(min_length=1, max_length=1024)] | None = Field(
        default=None,
        description="Triton's `label_filename`: a file in the model's directory naming each class, for "
        "the classification extension.",
    )
    is_shape_tensor: bool = Field(default=False, description="Triton's `is_shape_tensor` (TensorRT).")


class Instance(_Base):
    kind: Literal["GPU", "CPU", "AUTO", "MODEL"] = Field(
        default="AUTO", description="Instance kind (`GPU` becomes `CPU` when `server.gpus` is 0)."
    )
    count: Annotated[int, Field(ge=1, le=64)] = Field(default=1, description="Instances in the group.")
    gpus: list[Annotated[int, Field(ge=0)]] = Field(default=[], description="GPU indices for the group.")


class QueuePolicy(_Base):
    timeout_action: Literal["REJECT", "DELAY"] = Field(
        default="REJECT", description="What happens to a request that times out in the queue."
    )
    default_timeout_microseconds: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Longest time in the queue; 0 = no limit."
    )
    allow_timeout_override: bool = Field(default=False, description="Requests may set a shorter timeout.")
    max_queue_size: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Requests queued at most (more are rejected); 0 = no limit."
    )


class PriorityQueuePolicy(QueuePolicy):
    priority_level: Annotated[int, Field(ge=1)] = Field(description="The priority level it applies to.")


_LEVELS = "(has(self.priorityLevels) ? self.priorityLevels : 0)"
_DEFAULT_LEVEL = "(has(self.defaultPriorityLevel) ? self.defaultPriorityLevel : 0)"


class DynamicBatching(_Base):
    preferred_batch_sizes: list[Annotated[int, Field(ge=1)]] = Field(
        default=[], description="Preferred batch sizes."
    )
    max_queue_delay_microseconds: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Longest wait to fill a batch."
    )
    preserve_ordering: bool = Field(default=False, description="Return responses in request order.")
    priority_levels: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Priority levels (1 is the highest); 0 = no priorities."
    )
    default_priority_level: Annotated[int, Field(ge=0)] = Field(
        default=0, description="The level of a request that sets none (1..priorityLevels)."
    )
    default_queue_policy: QueuePolicy | None = Field(
        default=None, description="The queue policy of every priority level without its own."
    )
    priority_queue_policies: Annotated[list[PriorityQueuePolicy], Field(max_length=64)] = Field(
        default=[], description="Queue policies of particular priority levels."
    )

    RULES = (
        Rule(
            lambda d: (
                d.default_priority_level <= d.priority_levels
                and (d.priority_levels == 0 or d.default_priority_level >= 1)
            ),
            f"{_DEFAULT_LEVEL} <= {_LEVELS} && ({_LEVELS} == 0 || {_DEFAULT_LEVEL} >= 1)",
            "defaultPriorityLevel must be one of the levels 1..priorityLevels (set when priorityLevels is)",
        ),
        Rule(
            lambda d: all(q.priority_level <= d.priority_levels for q in d.priority_queue_policies),
            "!has(self.priorityQueuePolicies) || "
            f"self.priorityQueuePolicies.all(q, q.priorityLevel <= {_LEVELS})",
            "each priorityQueuePolicies[].priorityLevel must be one of the levels 1..priorityLevels",
        ),
    )


class VersionPolicy(_Base):
    policy: Literal["latest", "all", "specific"] = Field(
        description="Which version directories Triton serves: the latest `numVersions`, all, or `versions`."
    )
    num_versions: Annotated[int, Field(ge=1)] | None = Field(default=None, description="`latest` only.")
    versions: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=64)] = Field(
        default=[], description="`specific` only: the version numbers."
    )

    RULES = (
        Rule(
            lambda v: (
                (v.num_versions is None or v.policy == "latest")
                and ((v.policy == "specific") == bool(v.versions))
            ),
            "(!has(self.numVersions) || self.policy == 'latest') && ((self.policy == 'specific') == "
            "(has(self.versions) && size(self.versions) > 0))",
            "numVersions goes with policy latest, and versions (at least one) with policy specific only",
        ),
    )


def _all_differ(fields: tuple[str, ...]) -> str:
    """CEL: the optional string fields that are set all differ."""
    pairs = [(a, b) for i, a in enumerate(fields) for b in fields[i + 1 :]]
    return " && ".join(f"(!has(self.{a}) || !has(self.{b}) || self.{a} != self.{b})" for a, b in pairs)


FlagDataType = Literal["INT32", "FP32", "BOOL"]
CorrelationIdDataType = Literal["UINT64", "INT64", "UINT32", "INT32", "STRING"]


class Controls(_Base):
    start: TensorName | None = Field(
        default=None, description="START control: 1 on a sequence's first request."
    )
    end: TensorName | None = Field(default=None, description="END control: 1 on a sequence's last request.")
    ready: TensorName | None = Field(
        default=None, description="READY control: 1 where a batch slot holds a request."
    )
    correlation_id: TensorName | None = Field(
        default=None, description="Correlation ID control: the request's sequence ID."
    )
    flag_data_type: FlagDataType = Field(
        default="INT32",
        description="Data type of start, end and ready: INT32 (0/1), FP32 (0.0/1.0) or BOOL (false/true).",
    )
    correlation_id_data_type: CorrelationIdDataType = Field(
        default="UINT64",
        description="Data type of the correlation ID control; STRING for clients that send string "
        "sequence IDs.",
    )

    RULES = (
        Rule(
            lambda c: len(set(c.names())) == len(c.names()),
            _all_differ(("start", "end", "ready", "correlationId")),
            "the control tensors start, end, ready and correlationId need different names",
        ),
    )

    def names(self) -> list[str]:
        return [n for n in (self.start, self.end, self.ready, self.correlation_id) if n]


class InitialState(_Base):
    name: Annotated[str, Field(min_length=1, max_length=256)] = Field(description="A name for it (Triton's).")
    data_type: DataType = Field(description="Triton data type (the state's).")
    dims: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1, max_length=MAX_DIMS)] = Field(
        description="Fixed shape (no -1)."
    )
    zero_data: bool = Field(default=False, description="Start from zeros.")
    data_file: Annotated[str, Field(min_length=1, max_length=1024)] | None = Field(
        default=None, description="Start from this file under the model's `initial_state/` directory."
    )

    RULES = (
        Rule(
            lambda i: i.zero_data != (i.data_file is not None),
            "(has(self.zeroData) && self.zeroData) != has(self.dataFile)",
            "set exactly one of zeroData: true or dataFile",
        ),
    )


class State(_Base):
    input_name: TensorName = Field(description="State input tensor.")
    output_name: TensorName = Field(description="State output tensor.")
    data_type: DataType = Field(description="Triton data type.")
    dims: Dims = Field(description="State shape.")
    initial_state: InitialState | None = Field(
        default=None,
        description="What a sequence's first request sees (without it: uninitialised memory).",
    )
    use_same_buffer_for_input_output: bool = Field(
        default=False, description="Triton's `use_same_buffer_for_input_output` (TensorRT)."
    )
    use_growable_memory: bool = Field(default=False, description="Triton's `use_growable_memory` (TensorRT).")


class SequenceBatching(_Base):
    strategy: Literal["direct", "oldest"] = Field(
        default="direct", description="`direct` (one slot per sequence) or `oldest`."
    )
    max_sequence_idle_microseconds: Annotated[int, Field(ge=1)] = Field(
        default=1_000_000, description="Idle time after which a sequence is dropped."
    )
    controls: Controls = Field(
        default=Controls(),
        description="Control tensor names the batcher fills (never listed in `inputs`, never mapped by "
        "steps).",
    )
    states: Annotated[list[State], Field(max_length=MAX_STATES)] = Field(
        default=[], description="Implicit state entries, for backends that support them."
    )
    max_candidate_sequences: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="`oldest` only."
    )
    preferred_batch_sizes: list[Annotated[int, Field(ge=1)]] = Field(default=[], description="`oldest` only.")
    max_queue_delay_microseconds: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="`oldest` only."
    )
    iterative_sequence: bool = Field(
        default=False,
        description="Triton's `iterative_sequence`: the model reschedules a request until it completes "
        "(iterative generation, as in the tutorials' GPT-2).",
    )

    RULES = (
        Rule(
            lambda s: (
                s.strategy == "oldest"
                or (
                    s.max_candidate_sequences is None
                    and not s.preferred_batch_sizes
                    and s.max_queue_delay_microseconds is None
                )
            ),
            "self.strategy == 'oldest' || (!has(self.maxCandidateSequences) && "
            "!has(self.maxQueueDelayMicroseconds) && (!has(self.preferredBatchSizes) || "
            "size(self.preferredBatchSizes) == 0))",
            "maxCandidateSequences, preferredBatchSizes and maxQueueDelayMicroseconds only apply "
            "to strategy 'oldest'",
        ),
    )


class Model(_Base):
    name: Name = Field(description="Model name (Triton-safe).")
    backend: Annotated[str, _name_rule(BACKEND_RE, "backend")] | None = Field(
        default=None,
        description="Triton backend, e.g. `python`, `onnxruntime`. Exactly one of backend/platform.",
    )
    platform: Platform | None = Field(
        default=None, description="Triton platform. Exactly one of backend/platform."
    )
    max_batch_size: Annotated[int, Field(ge=0, le=1 << 20)] = Field(
        default=0, description="`0` = no batching; otherwise dims exclude the batch dimension."
    )
    inputs: Annotated[list[InputTensor], Field(min_length=1, max_length=MAX_TENSORS)] = Field(
        description="Input tensors (unique names)."
    )
    outputs: Annotated[list[OutputTensor], Field(min_length=1, max_length=MAX_TENSORS)] = Field(
        description="Output tensors (unique names)."
    )
    instances: Annotated[list[Instance], Field(max_length=MAX_INSTANCE_GROUPS)] = Field(
        default=[], description="Instance groups."
    )
    dynamic_batching: DynamicBatching | None = Field(
        default=None,
        description="Triton dynamic batcher (needs `maxBatchSize > 0`; not with sequenceBatching).",
    )
    sequence_batching: SequenceBatching | None = Field(
        default=None, description="Stateful model: sequence batcher (streaming ASR and the like)."
    )
    decoupled: bool = Field(
        default=False,
        description="Decoupled (streaming-response) model; a step's inputs (and a pipeline's outputs) must "
        "all descend from the same nearest decoupled step, or all from none, and no sequence-batched step "
        "may come after a decoupled one.",
    )
    parameters: dict[str, Any] = Field(
        default={}, description="Model `parameters` (string, number or boolean values)."
    )
    version_policy: VersionPolicy | None = Field(
        default=None, description="Triton's `version_policy` (default: the latest version)."
    )

    @field_validator("parameters")
    @classmethod
    def _scalar_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            if not isinstance(item, (str, int, float, bool)):
                raise ValueError(f"parameter {key!r} must be a string, number or boolean")
        return value

    RULES = (
        Rule(
            lambda m: (m.backend is None) != (m.platform is None),
            "has(self.backend) != has(self.platform)",
            "set exactly one of backend (such as python) or platform (such as tensorrt_plan)",
        ),
        Rule(
            lambda m: m.dynamic_batching is None or m.sequence_batching is None,
            "!(has(self.dynamicBatching) && has(self.sequenceBatching))",
            "dynamicBatching and sequenceBatching cannot both be set",
        ),
    )


class StepSpec(_Base):
    name: Name | None = Field(default=None, description="Step name; defaults to the model name.")
    model: Name = Field(description="A model from `spec.models`.")
    inputs: dict[str, str] = Field(
        default={},
        description="Model input -> `inputs.NAME` or `STEP.TENSOR`; every required input exactly once.",
    )

    @property
    def step_name(self) -> str:
        return self.name or self.model


class PipelineInput(_Base):
    name: TensorName = Field(description="Tensor name.")
    data_type: DataType = Field(description="Triton data type.")
    dims: Dims = Field(description="Shape (without the batch dimension when the pipeline batches).")
    optional: bool = Field(
        default=False,
        description="Clients may leave it out; every step input it feeds must then be optional too.",
    )


class PipelineOutput(_Base):
    name: TensorName = Field(description="Tensor name.")
    source: str = Field(alias="from", description="`STEP.TENSOR` that produces it.")


class Pipeline(_Base):
    name: Name = Field(description="Ensemble name.")
    inputs: Annotated[list[PipelineInput], Field(min_length=1, max_length=MAX_TENSORS)] = Field(
        description="Ensemble inputs; each must be used."
    )
    steps: Annotated[list[StepSpec], Field(min_length=1, max_length=MAX_STEPS)] = Field(
        description="The DAG: one step per model call."
    )
    outputs: Annotated[list[PipelineOutput], Field(min_length=1, max_length=MAX_TENSORS)] = Field(
        description="Ensemble outputs."
    )
    fan_out: Literal["router", "shared"] = Field(
        default="router",
        description="`router`: insert a router model per fanned-out tensor; `shared`: one tensor, many "
        "consumers.",
    )
    max_batch_size: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Ensemble max batch size; default: the smallest of its batching steps' (0 if none "
        "batches).",
    )


class SecretRef(_Base):
    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(
        description="Name of a Secret in the pipeline's namespace."
    )


class AdminKeyRef(_Base):
    """A Secret (in the pipeline's namespace) holding the key of Triton's administrative APIs."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(
        description="The Secret's name (in the pipeline's namespace)."
    )
    key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = Field(
        default="admin-key", description="Its data key holding the key."
    )


class KeyRef(_Base):
    """One key of a Secret or ConfigMap in the pipeline's namespace."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(
        description="The Secret's or ConfigMap's name (in the pipeline's namespace)."
    )
    key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = Field(
        default="ca.crt", description="Its data key holding the PEM CA bundle."
    )


class S3Options(_Base):
    """How the init container reaches an S3 or S3-compatible store (MinIO, Ceph RGW, ...)."""

    endpoint: Annotated[str, _name_rule(URL_RE, "url")] | None = Field(
        default=None, description="URL of an S3-compatible store (`https://minio.storage:9000`); absent: AWS."
    )
    region: Annotated[str, _name_rule(REGION_RE, "region")] | None = Field(
        default=None, description="The bucket's region (`us-east-1`)."
    )
    addressing_style: Literal["auto", "path", "virtual"] | None = Field(
        default=None,
        description="Bucket in the path or in the host name; absent: path-style with an endpoint (in-cluster "
        "host names take no bucket prefix), else boto3's choice.",
    )
    ca_secret_ref: KeyRef | None = Field(
        default=None,
        description="A Secret key holding the PEM CA bundle that signed the endpoint's certificate.",
    )
    ca_config_map_ref: KeyRef | None = Field(
        default=None, description="The same CA bundle from a ConfigMap key (give one of the two)."
    )

    RULES = (
        Rule(
            lambda o: o.ca_secret_ref is None or o.ca_config_map_ref is None,
            "!(has(self.caSecretRef) && has(self.caConfigMapRef))",
            "give the CA bundle once: caSecretRef or caConfigMapRef, not both",
            ".caConfigMapRef",
        ),
        Rule(
            lambda o: (
                (o.ca_secret_ref is None and o.ca_config_map_ref is None)
                or not (o.endpoint or "").startswith("http://")
            ),
            "!((has(self.caSecretRef) || has(self.caConfigMapRef)) && has(self.endpoint)"
            " && self.endpoint.startsWith('http://'))",
            "a CA bundle needs an https:// endpoint",
            ".endpoint",
        ),
    )


class GcsOptions(_Base):
    """gs:// credentials: the key of modelRepository.secretRef holding a service-account JSON key, mounted
    as a file for GOOGLE_APPLICATION_CREDENTIALS. Without secretRef the pod's identity is used
    (Workload Identity through spec.server.serviceAccountName)."""

    credentials_key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = Field(
        default="key.json",
        description="The key of modelRepository.secretRef holding the service-account key.",
    )


class ModelRepository(_Base):
    uri: Annotated[str, Field(min_length=1, max_length=1024)] = Field(
        description="`pvc://CLAIM/PATH`, `s3://BUCKET/PATH`, `gs://BUCKET/PATH`; a local path (relative to "
        "the file) for the CLI only."
    )
    secret_ref: SecretRef | None = Field(
        default=None,
        description="Cloud credentials for the init container: for s3:// a Secret whose keys become its "
        "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); for gs:// a Secret "
        "holding a service-account JSON key, mounted as a file (GOOGLE_APPLICATION_CREDENTIALS). Unset: the "
        "pod's identity (IRSA, Workload Identity through server.serviceAccountName).",
    )
    s3: S3Options | None = Field(
        default=None, description="s3:// only: endpoint, region, addressing style and CA bundle of the store."
    )
    gcs: GcsOptions | None = Field(
        default=None, description="gs:// only: which key of secretRef holds the key."
    )

    @field_validator("uri")
    @classmethod
    def _check_uri(cls, uri: str) -> str:
        if "://" in uri:
            scheme, _, rest = uri.partition("://")
            if scheme not in URI_SCHEMES:
                raise ValueError(
                    f"unsupported scheme {scheme!r} in {uri!r}: expected pvc://, s3://, gs:// or a local path"
                )
            head = rest.split("/", 1)[0]
            if not head:
                what = "claim" if scheme == "pvc" else "bucket"
                raise ValueError(f"{uri!r} has no {what} name: expected {scheme}://{what.upper()}/PATH")
            if scheme == "pvc" and not DNS_SUBDOMAIN_RE.fullmatch(head):
                raise ValueError(f"invalid claim name {head!r} in {uri!r}: {RULE_TEXT['object name']}")
        if any(c in uri for c in "\n\r\0"):
            raise ValueError("the uri contains control characters")
        return uri

    RULES = (
        Rule(
            lambda r: r.s3 is None or r.uri.startswith("s3://"),
            "!has(self.s3) || self.uri.startsWith('s3://')",
            "applies to s3:// sources only",
            ".s3",
        ),
        Rule(
            lambda r: r.gcs is None or r.uri.startswith("gs://"),
            "!has(self.gcs) || self.uri.startsWith('gs://')",
            "applies to gs:// sources only",
            ".gcs",
        ),
    )

    @property
    def scheme(self) -> str:
        return self.uri.partition("://")[0] if "://" in self.uri else "local"


class Server(_Base):
    image: Annotated[str, Field(min_length=1)] = Field(
        default=DEFAULT_IMAGE,
        description="tritonserver image of the pods; `validate` warns for a Triton release older than the "
        "known security fixes (see the README's Security section).",
    )
    replicas: Annotated[int, Field(ge=0, le=1000)] = Field(
        default=1, description="Pods; ignored when `autoscaling` is set (the HPA owns replicas)."
    )
    gpus: Annotated[int, Field(ge=0, le=64)] = Field(
        default=1, description="GPUs per pod; `0` = CPU only (GPU instance groups become CPU ones)."
    )
    gpu_resource: Annotated[str, _name_rule(RESOURCE_RE, "resource name")] = Field(
        default=NVIDIA_GPU,
        description="Extended resource to request, e.g. a MIG profile `nvidia.com/mig-1g.10gb` (then `gpus` "
        "must be 1, since one process uses one MIG device, and `autoscaling.metric` cannot be "
        "`gpuUtilization`: Triton reads no GPU metrics from MIG devices).",
    )
    resources: dict[str, Any] = Field(
        default={},
        description="CPU/memory `requests`/`limits` of the Triton container, passed through; a request of "
        "`cpu: 1`, `memory: 2Gi` and `ephemeral-storage: 2Gi` is added for each that sets neither a request "
        "nor a limit (so pods are not BestEffort), and a `memory: 16Gi` limit when memory is not set at all "
        "(so one pipeline cannot take a node's memory).",
    )
    shm_size_limit: Quantity = Field(
        default="2Gi", description="Size limit of the pod's `/dev/shm` (memory; Python-backend tensors)."
    )
    models_size_limit: Quantity = Field(
        default="50Gi", description="Size limit of the volume the init container copies the models into."
    )
    node_selector: dict[str, str] = Field(default={}, description="Passed through to the pod.")
    tolerations: list[dict[str, Any]] = Field(
        default=[],
        description="Passed through; the `nvidia.com/gpu` NoSchedule toleration is added when `gpus > 0`.",
    )
    affinity: dict[str, Any] = Field(
        default={},
        description="Passed through to the pod. Absent: a preferred `podAntiAffinity` on "
        "`kubernetes.io/hostname` spreads the replicas over nodes.",
    )
    args: list[str] = Field(default=[], description="Extra `tritonserver` flags.")
    # merged field by field over the operator's restricted-compliant defaults (kube/manifests.py)
    security_context: dict[str, Any] | None = Field(
        default=None,
        description="Security context of the Triton and init containers. Default (restricted-compliant): "
        "`allowPrivilegeEscalation: false`, `capabilities.drop: [ALL]`, and for the init container "
        "`readOnlyRootFilesystem: true`; a mapping is merged over it field by field. More than Pod Security "
        "`restricted` allows is refused unless the cluster admin allows it.",
    )
    pod_security_context: dict[str, Any] | None = Field(
        default=None,
        description="Pod security context. Default: `runAsNonRoot`, uid/gid/fsGroup 1000 (NVIDIA's "
        "`triton-server` user), `seccompProfile: RuntimeDefault`, so pods run in namespaces enforcing Pod "
        "Security `restricted`; a mapping is merged over it field by field.",
    )
    service_account_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None,
        description="ServiceAccount of the Triton pods (IRSA, Workload Identity); default: the namespace's "
        "`default`.",
    )
    image_pull_secrets: list[SecretRef] = Field(
        default=[],
        description="`[{name: SECRET}]` for the Triton image; the chart's `imagePullSecrets` (the init "
        "container's image) are added.",
    )
    init_resources: dict[str, Any] = Field(
        default={},
        description="`requests`/`limits` of the init container. Default: requests `cpu: 100m`, `memory: "
        "128Mi`, `ephemeral-storage: 256Mi`, limit `memory: 1Gi`.",
    )
    startup_timeout_seconds: Annotated[int, Field(ge=10, le=86400)] = Field(
        default=600,
        description="How long Triton may take to load its models before the startup probe restarts it (large "
        "models load for minutes).",
    )
    # the Deployment's strategy, passed through; None: the operator's default (kube/manifests.py)
    strategy: dict[str, Any] | None = Field(
        default=None,
        description="The Deployment's `strategy`, passed through. Default: GPU pipelines with more than one "
        "replica (or an autoscaler) replace pods in place (`maxSurge: 0`, `maxUnavailable: 1`: a surge "
        "pod needs a free GPU, and in a full pool it stays Pending and the rollout stalls); a single GPU "
        "replica and CPU pods surge (`maxSurge: 1`, `maxUnavailable: 0`). A stalled rollout shows as "
        "`Progressing=False`, `RolloutStalled`.",
    )
    admin_key_secret_ref: AdminKeyRef | None = Field(
        default=None,
        description="A Secret of yours holding the admin-API key; absent: the operator creates "
        "`<name>-admin-key` with a random key (see the README's Security section).",
    )

    @field_validator("args")
    @classmethod
    def _flags(cls, args: list[str]) -> list[str]:
        found = tritonserver_options.problems(args)
        if found:
            raise FieldProblems([(f"[{p.index}]", p.message) for p in found])
        return args

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, selector: dict[str, str]) -> dict[str, str]:
        found = [
            (f".{key}", f"invalid {what} {text!r}: {RULE_TEXT[what]}")
            for key, value in selector.items()
            for what, text, pattern in (
                ("label key", key, LABEL_NAME_RE),
                ("label value", value, LABEL_VALUE_RE),
            )
            if not pattern.fullmatch(text)
        ]
        if found:
            raise FieldProblems(found)
        return selector


# The Gateway API implementations whose header-hashing policy the operator renders (kube/routing.py), and
# `standard`: the Gateway API's own sessionPersistence
GatewayImplementation = Literal["envoy-gateway", "istio", "nginx-gateway-fabric", "standard"]
# NGINX Gateway Fabric takes the hash key as an nginx variable matching ^\$[a-z_]+$: no digits
NGINX_GATEWAY_HEADER_RE = re.compile(r"^[A-Za-z-]+$")


class GatewayRef(_Base):
    """The Gateway that the HTTPRoute and GRPCRoute attach to (provider gateway-api)."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(description="Gateway name.")
    namespace: Annotated[str, _name_rule(DNS_LABEL_RE, "namespace")] | None = Field(
        default=None, description="Gateway namespace; absent: the pipeline's."
    )
    section_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None, description="One listener of the Gateway."
    )
    implementation: GatewayImplementation | None = Field(
        default=None,
        description="Whose consistent-hash policy on the header goes with the routes: `envoy-gateway` "
        "(BackendTrafficPolicy), `istio` (DestinationRule), `nginx-gateway-fabric` (UpstreamSettingsPolicy) "
        "or `standard` (the routes' own `sessionPersistence`, which pins a value the gateway issues, not "
        "the client's key); absent: read from the controllerName of the Gateway's GatewayClass.",
    )


class Routing(_Base):
    session_affinity: Literal["None", "ClientIP", "Header", "Stream"] = Field(
        default="None",
        description="`None`, `ClientIP` (Service affinity), `Header` (a proxy hashes a header) or "
        "`Stream` (recommended for sequences: each sequence is one gRPC stream of `tritonpipeline.client`, "
        "which stays on the pod it reached; a leaving pod serves its open streams to their end before "
        "Triton stops).",
    )
    stream_drain_seconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=600,
        description="With `Stream`: the longest a leaving pod (scale-down, rollout) waits for its open "
        "sequence streams to end before Triton stops.",
    )
    header: Annotated[str, _name_rule(HEADER_RE, "header")] = Field(
        default="x-triton-sequence-id", description="Header to hash on, with `Header`."
    )
    provider: Literal["ingress-nginx", "istio", "gateway-api"] = Field(
        default="gateway-api",
        description="Who routes on the header: `gateway-api` (HTTPRoute + GRPCRoute attached to "
        "`gateway`, with the consistent-hash policy of the Gateway's implementation), `istio` (a "
        "DestinationRule with `consistentHash.httpHeaderName`) or `ingress-nginx` (deprecated: retired "
        "upstream; two Ingresses with `upstream-hash-by`).",
    )
    host: Annotated[str, _name_rule(HOST_RE, "host")] | None = Field(
        default=None, description="Host name for the Ingress rules / route `hostnames`; absent: any host."
    )
    ingress_class_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None, description="`ingressClassName` of the Ingresses (ingress-nginx)."
    )
    tls_secret_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None,
        description="TLS Secret of the Ingresses (ingress-nginx serves gRPC over HTTP/2 only with TLS).",
    )
    gateway: GatewayRef | None = Field(
        default=None,
        description="The Gateway the routes attach to (`parentRefs`); required with provider `gateway-api`.",
    )

    RULES = (
        Rule(
            lambda r: r.session_affinity != "Header" or len(r.header) > 0,
            "self.sessionAffinity != 'Header' || size(self.header) > 0",
            "sessionAffinity Header needs a header name",
            ".header",
        ),
        Rule(
            lambda r: r.session_affinity != "Header" or r.provider != "gateway-api" or r.gateway is not None,
            "self.sessionAffinity != 'Header' || self.provider != 'gateway-api' || has(self.gateway)",
            "provider gateway-api (the default) needs routing.gateway, the Gateway the HTTPRoute and "
            "GRPCRoute attach to; or set routing.provider to istio",
            ".gateway",
        ),
        Rule(
            lambda r: (
                r.gateway is None
                or r.gateway.implementation != "nginx-gateway-fabric"
                or NGINX_GATEWAY_HEADER_RE.fullmatch(r.header) is not None
            ),
            "!has(self.gateway) || !has(self.gateway.implementation) || "
            "self.gateway.implementation != 'nginx-gateway-fabric' || self.header.matches('"
            + NGINX_GATEWAY_HEADER_RE.pattern
            + "')",
            "NGINX Gateway Fabric hashes on an nginx variable of letters and underscores: a header for "
            "implementation nginx-gateway-fabric has letters and '-' only",
            ".header",
        ),
    )


class Autoscaling(_Base):
    min_replicas: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=1, description="Lower bound (<= maxReplicas)."
    )
    max_replicas: Annotated[int, Field(ge=1, le=1000)] = Field(description="Upper bound.")
    metric: AutoscalingMetric = Field(
        default="queueTime",
        description="`queueTime` (avg µs queued per request), `pendingRequests` or `gpuUtilization`.",
    )
    target: Annotated[float, Field(gt=0)] = Field(
        default=50, description="Target value of the metric per pod."
    )
    engine: Literal["hpa", "keda"] = Field(
        default="hpa",
        description="`hpa`: an autoscaling/v2 HPA with a Pods metric served by prometheus-adapter (rules in "
        "the chart). `keda`: a KEDA ScaledObject with a prometheus trigger on the generated query (when "
        "KEDA is installed).",
    )
    prometheus_address: Annotated[str, _name_rule(URL_RE, "url")] | None = Field(
        default=None,
        description="Prometheus URL for the KEDA trigger; absent: the operator's "
        "`TRITONPIPELINE_PROMETHEUS_ADDRESS`.",
    )
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] | None = Field(
        default=None,
        description="The HPA's `behavior.scaleDown.stabilizationWindowSeconds` (also through KEDA): how long "
        "load must stay low before pods are removed; absent: the HPA's 300. A stateful pipeline never gets "
        "less than its longest sequence idle time.",
    )

    RULES = (
        Rule(
            lambda a: a.min_replicas <= a.max_replicas,
            "self.minReplicas <= self.maxReplicas",
            "minReplicas must be <= maxReplicas",
            ".minReplicas",
        ),
    )

    @field_validator("target", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class NetworkPolicy(_Base):
    """Who may reach the pipeline's pods: NetworkPolicy peers (podSelector, namespaceSelector, ipBlock).
    Unset: the pods of the pipeline's namespace; an empty list: nobody."""

    inference: list[dict[str, Any]] | None = Field(
        default=None,
        description="NetworkPolicy peers that may reach HTTP 8000 and gRPC 8001; absent: the pods of the "
        "pipeline's namespace; `[]`: nobody.",
    )
    metrics: list[dict[str, Any]] | None = Field(
        default=None,
        description="NetworkPolicy peers that may scrape metrics on 8002; absent: the pods of the pipeline's "
        "namespace; `[]`: nobody.",
    )


class PipelineSpec(_Base):
    server: Server = Field(default=Server(), description="The Triton pods.")
    model_repository: ModelRepository = Field(description="Where the model files live.")
    models: Annotated[list[Model], Field(min_length=1, max_length=MAX_MODELS)] = Field(
        description="Every model the pipelines use; files under `uri/<name>/`. Unique names."
    )
    pipelines: Annotated[list[Pipeline], Field(max_length=MAX_PIPELINES)] = Field(
        default=[],
        description="Each becomes one ensemble model named after it. Unique names. None: the models are "
        "served on their own (a BLS model that calls the others, say).",
    )
    routing: Routing = Field(default=Routing(), description="Session affinity across pods.")
    autoscaling: Autoscaling | None = Field(default=None, description="Absent = fixed `server.replicas`.")
    network_policy: NetworkPolicy | None = Field(
        default=None,
        description="Absent: no NetworkPolicy. Present: one NetworkPolicy (ingress only) on the pipeline's "
        "pods (see the README's Security section).",
    )

    @model_validator(mode="after")
    def _instance_gpus(self) -> PipelineSpec:
        found = [
            (f".models[{i}].instances[{j}].gpus", message)
            for i, model in enumerate(self.models)
            for j, inst in enumerate(model.instances)
            if (message := _gpus_problem(inst, self.server.gpus))
        ]
        if found:
            raise FieldProblems(found)
        return self


def _gpus_problem(inst: Instance, server_gpus: int) -> str | None:
    """Why an instance group's GPU indices cannot work in a pod with `server_gpus` GPUs, or None.
    With server.gpus 0 every GPU group runs on the CPU and its indices are dropped (a warning)."""
    if not inst.gpus:
        return None
    if inst.kind != "GPU":
        return f"gpus pins GPU devices, so it needs kind GPU (this group has kind {inst.kind})"
    wrong = [g for g in inst.gpus if g >= server_gpus]
    if server_gpus and wrong:
        return (
            f"GPU index {', '.join(map(str, wrong))} does not exist in the pod: spec.server.gpus is "
            f"{server_gpus}, so the valid indices are 0..{server_gpus - 1}"
        )
    return None


class Metadata(BaseModel):
    """Kubernetes ObjectMeta: only name/namespace matter; the apiserver's other fields are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: Annotated[str, _name_rule(K8S_NAME_RE, "metadata.name")]
    namespace: Annotated[str, _name_rule(DNS_LABEL_RE, "namespace")] | None = None
    generation: int | None = None


class TritonPipeline(_Base):
    api_version: str
    kind: str
    metadata: Metadata
    spec: PipelineSpec
    status: dict[str, Any] | None = None

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        if value != API_VERSION:
            raise ValueError(f"expected {API_VERSION!r}, got {quote(value)}")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != KIND:
            raise ValueError(f"expected {KIND!r}, got {quote(value)}")
        return value

    @property
    def name(self) -> str:
        return self.metadata.name


# --------------------------------------------------------------------------- YAML


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    # only keys written in this mapping count: a `<<` merge key's entries may be overridden on purpose
    explicit = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node in explicit:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            first = seen[key].start_mark
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first defined at line {first.line + 1}); "
                "YAML would silently keep only the last one",
                mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _duplicate_keys(node: yaml.Node | None, path: str, seen_nodes: set[int]) -> list[Problem]:
    """Duplicate mapping keys anywhere under a composed node, reported at their field path."""
    if node is None or id(node) in seen_nodes:
        return []
    seen_nodes.add(id(node))
    found: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], yaml.Node] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            child = f"{path}.{key}" if path and key is not None else (key or path)
            if key is not None and key_node.tag != "tag:yaml.org,2002:merge":
                if (key_node.tag, key) in first:
                    was, mark = first[(key_node.tag, key)].start_mark, key_node.start_mark
                    found.append(
                        Problem(
                            child,
                            f"duplicate key {key!r} at line {mark.line + 1}, column {mark.column + 1} (first "
                            f"defined at line {was.line + 1}); YAML would silently keep only the last one",
                        )
                    )
                first.setdefault((key_node.tag, key), key_node)
            found += _duplicate_keys(value_node, child, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicate_keys(item, f"{path}[{i}]", seen_nodes)
    return found


def load_documents(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """Parse YAML text (one or several documents) refusing duplicate keys; empty documents are skipped."""
    try:
        nodes = list(yaml.compose_all(text, Loader=_StrictLoader))
        dups = [
            Problem((f"document {i + 1}: " if len(nodes) > 1 and p.path else "") + p.path, p.message)
            for i, node in enumerate(nodes)
            for p in _duplicate_keys(node, "", set())
        ]
        if dups:
            raise SpecError(dups, source)
        docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([Problem(where, f"invalid YAML: {exc.problem or exc}")], source) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem("", f"invalid YAML: {exc}")], source) from None
    if not docs:
        raise SpecError([Problem("", "no TritonPipeline document found")], source)
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise SpecError(
                [Problem(f"document {i + 1}", f"expected a mapping (a TritonPipeline), got {_kind(doc)}")],
                source,
            )
    return docs


# --------------------------------------------------------------------------- errors


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    names = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }
    return names.get(type(value), f"a {type(value).__name__}")


def format_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """('spec', 'models', 0, 'name') -> 'spec.models[0].name'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _allowed_fields(model: type[BaseModel]) -> list[str]:
    return sorted((f.alias or n) for n, f in model.model_fields.items())


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Walk the model tree along a location to find which model class holds it."""
    current: Any = TritonPipeline
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next((f for n, f in current.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return current
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    while args:
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0]
        inner = [a for a in args if getattr(a, "__args__", None)]
        if not inner:
            break
        annotation = inner[0]
        args = getattr(annotation, "__args__", None)
    return annotation


def _message(err: ErrorDetails) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        owner = _model_at(tuple(err["loc"][:-1]))
        allowed = f" (allowed: {', '.join(_allowed_fields(owner))})" if owner else ""
        return f"unknown field{allowed}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected', '')}, got {quote(value)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected an integer, got {_kind(value)} {quote(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"expected a number, got {_kind(value)} {quote(value)}"
    if kind in ("string_type",):
        return f"expected a string, got {_kind(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {_kind(value)} {quote(value)}"
    if kind in ("list_type",):
        return f"expected a list, got {_kind(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping, got {_kind(value)}"
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}, got {quote(value)}"
    if kind == "greater_than":
        return f"must be > {ctx.get('gt')}, got {quote(value)}"
    if kind == "less_than_equal":
        return f"must be <= {ctx.get('le')}, got {quote(value)}"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"allows at most {ctx.get('max_length')} item(s)"
    if kind in ("string_too_short",):
        return "must not be empty"
    return str(err["msg"])


def _problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        error = (err.get("ctx") or {}).get("error")
        if isinstance(error, FieldProblems):
            problems += [Problem(format_path(loc) + sub, message) for sub, message in error.items]
            continue
        problems.append(Problem(format_path(loc), _message(err)))
    return problems


def parse_pipeline(doc: dict[str, Any], source: str | None = None) -> TritonPipeline:
    """Validate one TritonPipeline mapping. Raises SpecError listing every problem found."""
    try:
        return TritonPipeline.model_validate(doc)
    except ValidationError as exc:
        raise SpecError(_problems(exc), source) from None


def parse_text(text: str, source: str = "<input>") -> list[TritonPipeline]:
    """Parse every TritonPipeline document in a YAML text; problems from all documents are collected."""
    docs = load_documents(text, source)
    out: list[TritonPipeline] = []
    problems: list[Problem] = []
    for i, doc in enumerate(docs):
        prefix = f"document {i + 1}: " if len(docs) > 1 else ""
        try:
            out.append(parse_pipeline(doc))
        except SpecError as exc:
            problems += [
                Problem(p.path, p.message) if not prefix else Problem(prefix + p.path, p.message)
                for p in exc.problems
            ]
    problems += _same_names(out) if not problems else []
    if problems:
        raise SpecError(problems, source)
    return out


def _same_names(pipelines: list[TritonPipeline]) -> list[Problem]:
    """Two documents for one object (same name and namespace): a cluster would keep only the last."""
    first: dict[tuple[str | None, str], int] = {}
    found = []
    for i, tp in enumerate(pipelines):
        key = (tp.metadata.namespace, tp.name)
        if key in first:
            where = f" in namespace {key[0]!r}" if key[0] else ""
            found.append(
                Problem(
                    f"document {i + 1}: metadata.name",
                    f"a second TritonPipeline named {tp.name!r}{where} (also document {first[key] + 1}); "
                    "applying the file would keep only the last one",
                )
            )
        first.setdefault(key, i)
    return found


def load_file(path: str | Path) -> list[TritonPipeline]:
    """Read and parse a YAML file of TritonPipeline documents."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read file: {exc.strerror}")], str(p)) from None
    except UnicodeDecodeError:
        raise SpecError([Problem("", "file is not UTF-8 text")], str(p)) from None
    return parse_text(text, str(p))
