"""spec.models[]: a model, its tensors, instance groups, dynamic and sequence batching, version policy."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
)

from .base import (
    BACKEND_RE,
    INT32_MAX,
    MAX_BATCH_SIZE,
    MAX_DIMS,
    MAX_EXTRA_CONFIG,
    MAX_INSTANCE_GROUPS,
    MAX_INTEGER,
    MAX_STATES,
    MAX_TENSORS,
    RESHAPE_DESCRIPTION,
    UINT32_MAX,
    DataType,
    Dims,
    FixedDim,
    ModelName,
    Platform,
    ProfileIndex,
    Reshape,
    Rule,
    TensorName,
    _Base,
    _name_rule,
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


class RateLimiterResource(_Base):
    name: Annotated[str, Field(min_length=1, max_length=256)] = Field(description="The resource's name.")
    global_: bool = Field(
        default=False,
        alias="global",
        description="One pool of the resource for the whole server (otherwise one per device).",
    )
    count: Annotated[int, Field(ge=0, le=UINT32_MAX)] = Field(
        default=0, description="Units of the resource an instance needs to run."
    )


class RateLimiter(_Base):
    resources: Annotated[list[RateLimiterResource], Field(max_length=64)] = Field(
        default=[], description="Resources an instance needs to run."
    )
    priority: Annotated[int, Field(ge=0, le=UINT32_MAX)] = Field(
        default=0, description="Weight against other instances (a higher one runs less often); 0 = 1."
    )


class Instance(_Base):
    name: TensorName | None = Field(
        default=None,
        description="Triton's `name` of the group, in its logs (default: Triton's `<model>_<index>`).",
    )
    kind: Literal["GPU", "CPU", "AUTO", "MODEL"] = Field(
        default="AUTO", description="Instance kind (`GPU` becomes `CPU` when `server.gpus` is 0)."
    )
    count: Annotated[int, Field(ge=1, le=64)] = Field(default=1, description="Instances in the group.")
    gpus: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] = Field(
        default=[], description="GPU indices for the group."
    )
    profile: Annotated[list[ProfileIndex], Field(max_length=64)] = Field(
        default=[],
        description="Triton's `profile`: the TensorRT optimization profiles the group's instances use, by "
        'index (`"0"`); TensorRT models only.',
    )
    passive: bool = Field(
        default=False,
        description="Triton's `passive`: loaded, but not scheduled (another process drives it).",
    )
    host_policy: Annotated[str, Field(min_length=1, max_length=256)] | None = Field(
        default=None,
        description="Triton's `host_policy`: the name of a `--host-policy` of the server's args.",
    )
    rate_limiter: RateLimiter | None = Field(
        default=None,
        description="Triton's `rate_limiter` (in effect with `--rate-limit=execution_count` in the server's "
        "args): the resources an instance needs, and its priority.",
    )


class QueuePolicy(_Base):
    timeout_action: Literal["REJECT", "DELAY"] = Field(
        default="REJECT", description="What happens to a request that times out in the queue."
    )
    default_timeout_microseconds: Annotated[int, Field(ge=0, le=MAX_INTEGER)] = Field(
        default=0, description="Longest time in the queue; 0 = no limit."
    )
    allow_timeout_override: bool = Field(default=False, description="Requests may set a shorter timeout.")
    max_queue_size: Annotated[int, Field(ge=0, le=UINT32_MAX)] = Field(
        default=0, description="Requests queued at most (more are rejected); 0 = no limit."
    )


class PriorityQueuePolicy(QueuePolicy):
    priority_level: Annotated[int, Field(ge=1, le=MAX_INTEGER)] = Field(
        description="The priority level it applies to."
    )


_LEVELS = "(has(self.priorityLevels) ? self.priorityLevels : 0)"
_DEFAULT_LEVEL = "(has(self.defaultPriorityLevel) ? self.defaultPriorityLevel : 0)"
_ORDERED = "(has(self.preserveOrdering) && self.preserveOrdering)"


def _delays_cel(policy: str) -> str:
    """CEL: the queue policy `policy` holds timed-out requests back (DELAY with a timeout)."""
    return (
        f"(has({policy}.timeoutAction) && {policy}.timeoutAction == 'DELAY' && "
        f"has({policy}.defaultTimeoutMicroseconds) && {policy}.defaultTimeoutMicroseconds != 0)"
    )


def _delays(policy: QueuePolicy | None) -> bool:
    """The queue policy holds timed-out requests back (DELAY with a timeout)."""
    return (
        policy is not None and policy.timeout_action == "DELAY" and policy.default_timeout_microseconds != 0
    )


class DynamicBatching(_Base):
    preferred_batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]] = Field(
        default=[], description="Preferred batch sizes."
    )
    max_queue_delay_microseconds: Annotated[int, Field(ge=0, le=MAX_INTEGER)] = Field(
        default=0, description="Longest wait to fill a batch."
    )
    preserve_ordering: bool = Field(default=False, description="Return responses in request order.")
    priority_levels: Annotated[int, Field(ge=0, le=MAX_INTEGER)] = Field(
        default=0, description="Priority levels (1 is the highest); 0 = no priorities."
    )
    default_priority_level: Annotated[int, Field(ge=0, le=MAX_INTEGER)] = Field(
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
        # Triton's ValidateModelConfig: ordered responses come from one queue, in arrival order
        Rule(
            lambda d: not d.preserve_ordering or d.priority_levels <= 1,
            f"!{_ORDERED} || {_LEVELS} <= 1",
            "preserveOrdering allows one priority level at most (Triton refuses the model: 'Only one "
            "priority level is allowed when preserve_ordering is true')",
        ),
        Rule(
            lambda d: (
                not d.preserve_ordering
                or not any(_delays(q) for q in (d.default_queue_policy, *d.priority_queue_policies))
            ),
            f"!{_ORDERED} || ("
            f"(!has(self.defaultQueuePolicy) || !{_delays_cel('self.defaultQueuePolicy')}) && "
            "(!has(self.priorityQueuePolicies) || "
            f"self.priorityQueuePolicies.all(q, !{_delays_cel('q')})))",
            "preserveOrdering takes no queue policy with timeoutAction DELAY and a "
            "defaultTimeoutMicroseconds (Triton refuses the model: 'Queue policy can not have DELAY as "
            "timeout action when preserve_ordering is true')",
        ),
    )


class VersionPolicy(_Base):
    policy: Literal["latest", "all", "specific"] = Field(
        description="Which version directories Triton serves: the latest `numVersions`, all, or `versions`."
    )
    num_versions: Annotated[int, Field(ge=1, le=UINT32_MAX)] | None = Field(
        default=None, description="`latest` only."
    )
    versions: Annotated[list[Annotated[int, Field(ge=0, le=MAX_INTEGER)]], Field(max_length=64)] = Field(
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
    dims: Annotated[list[FixedDim], Field(min_length=1, max_length=MAX_DIMS)] = Field(
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
    max_sequence_idle_microseconds: Annotated[int, Field(ge=1, le=MAX_INTEGER)] = Field(
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
    max_candidate_sequences: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = Field(
        default=None, description="`oldest` only."
    )
    preferred_batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]] = Field(
        default=[], description="`oldest` only."
    )
    max_queue_delay_microseconds: Annotated[int, Field(ge=0, le=MAX_INTEGER)] | None = Field(
        default=None,
        description="Longest wait to fill a batch: `oldest`, or `direct` with `minimumSlotUtilization`.",
    )
    preserve_ordering: bool = Field(
        default=False, description="`oldest` only: return responses in the order the requests came."
    )
    minimum_slot_utilization: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        default=None,
        description="`direct` only: the share of batch slots that must hold a request before a batch runs "
        "without waiting `maxQueueDelayMicroseconds` (0 to 1).",
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
                    and not s.preserve_ordering
                )
            ),
            "self.strategy == 'oldest' || (!has(self.maxCandidateSequences) && "
            "(!has(self.preferredBatchSizes) || size(self.preferredBatchSizes) == 0) && "
            "!(has(self.preserveOrdering) && self.preserveOrdering))",
            "maxCandidateSequences, preferredBatchSizes and preserveOrdering only apply to strategy 'oldest'",
        ),
        Rule(
            lambda s: s.strategy == "direct" or s.minimum_slot_utilization is None,
            "self.strategy == 'direct' || !has(self.minimumSlotUtilization)",
            "minimumSlotUtilization only applies to strategy 'direct'",
        ),
    )


class Model(_Base):
    name: ModelName = Field(
        description="Model name: its directory's in the repository (letters, digits, `_`, `-`, `.`)."
    )
    backend: Annotated[str, _name_rule(BACKEND_RE, "backend")] | None = Field(
        default=None,
        description="Triton backend, e.g. `python`, `onnxruntime`. Exactly one of backend/platform.",
    )
    platform: Platform | None = Field(
        default=None, description="Triton platform. Exactly one of backend/platform."
    )
    max_batch_size: Annotated[int, Field(ge=0, le=MAX_BATCH_SIZE)] = Field(
        default=0, description="`0` = no batching; otherwise dims exclude the batch dimension."
    )
    inputs: Annotated[list[InputTensor], Field(max_length=MAX_TENSORS)] = Field(
        default=[],
        description="Input tensors (unique names). Leave inputs and outputs out for a model whose backend "
        "completes them when Triton loads it (vLLM, a Python model's `auto_complete_config`, ONNX Runtime "
        "and TensorRT from the model file); a pipeline step maps only declared inputs.",
    )
    outputs: Annotated[list[OutputTensor], Field(max_length=MAX_TENSORS)] = Field(
        default=[],
        description="Output tensors (unique names). Left out: completed by the backend when Triton loads "
        "the model (needs Triton's auto-complete, on unless `server.args` turns it off); a step's outputs "
        "are the declared ones.",
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
        "may come after a decoupled one. A model a step runs is loaded with this policy, false included: "
        "Triton refuses a backend that completes it otherwise (`vllm` models are decoupled: true).",
    )
    parameters: dict[str, Any] = Field(
        default={}, description="Model `parameters` (string, number or boolean values)."
    )
    version_policy: VersionPolicy | None = Field(
        default=None, description="Triton's `version_policy` (default: the latest version)."
    )
    extra_config: Annotated[str, Field(min_length=1, max_length=MAX_EXTRA_CONFIG)] | None = Field(
        default=None,
        description="More of the model's config.pbtxt, in Triton's text format: the fields the spec does not "
        "name (`default_model_filename`, `optimization`, `model_warmup`, `response_cache`, `batch_input`, "
        "...), added to the rendered config as written. It may not set a field the spec's own fields "
        "render (name, backend, platform, max_batch_size, input, output, instance_group, the batchers, "
        "model_transaction_policy, parameters, version_policy); `tritonpipeline import` writes here what "
        "a config holds beyond them.",
    )

    @field_validator("parameters")
    @classmethod
    def _scalar_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            if not isinstance(item, (str, int, float, bool)):
                raise ValueError(f"parameter {key!r} must be a string, number or boolean")
            if isinstance(item, float) and not math.isfinite(item):  # .nan, .inf: no JSON number
                raise ValueError(
                    f"parameter {key!r} must be a finite number (JSON, so kubectl, holds no {item})"
                )
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
