"""The tables the mapper reads: Triton's defaults the render writes differently (NORMALISATIONS), the
backend a model file implies (MODEL_FILES), and each config section's Triton field -> spec field rows
(`Carry`), so that a field the spec gains is one row here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..compiler.autocomplete import POLICY_FIELD
from ..compiler.triton_config import mc

CONFIG = "config.pbtxt"
ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True)
class Normalisation:
    """A value the import writes differently from the config, and why Triton behaves the same."""

    field: str  # Triton config field path; [*]: any index
    triton: str  # what Triton makes of the field (its default, or the equivalent form)
    note: str  # what the import and the render do instead
    default: Any = None  # Triton's value when the field is absent: written when the spec's default differs
    same_as: str | None = None  # a message (text format) equal to Triton's default: not reported when given


# Triton's defaults that the render does not reproduce byte for byte. Each is either filled in by Triton
# (NormalizeModelConfig in triton-inference-server/core, model_config_utils.cc) or means the same thing to
# it; the round trip in tests/component/test_import.py compares the configs after applying exactly these.
NORMALISATIONS: tuple[Normalisation, ...] = (
    # Triton names a model after its directory when the config has no name (a different name: an error)
    Normalisation("name", "the directory's name", "written as the model name"),
    # AutoCompleteBackendFields picks the backend by the model file when the config names none (MODEL_FILES)
    Normalisation(
        "backend",
        "none given: picked by the model file in the first subdirectory (model.py: python, ...), else "
        "by the model's name (model.dali: dali)",
        "written as that backend or platform",
    ),
    # NormalizeModelConfig fills the backend in from the platform (onnxruntime_onnx -> onnxruntime, ...)
    Normalisation(
        "backend", "filled in from platform", "with a matching platform only the platform is written"
    ),
    # KIND_AUTO is the enum's zero: an instance group without kind is KIND_AUTO
    Normalisation("instance_group[*].kind", "KIND_AUTO", "written as kind AUTO"),
    # "if (group.count() < 1) group.set_count(1)"
    Normalisation("instance_group[*].count", "1", "written as count 1", default=1),
    # Triton names the i-th group <model>_<i>; the render writes a name only where the spec gives one
    Normalisation("instance_group[*].name", "<model>_<i>", "left out when it is Triton's own name"),
    # SEQUENCE_IDLE_DEFAULT_MICROSECONDS; the spec's default is the same, the render writes it
    Normalisation(
        "sequence_batching.max_sequence_idle_microseconds",
        "1000000 (1 s)",
        "left out when 1000000 (the spec's default); written when the spec's default differs",
        default=1_000_000,
    ),
    # without oldest Triton's sequence batcher uses the direct strategy; the render writes `direct {}`
    Normalisation(
        "sequence_batching.direct", "direct when neither direct nor oldest is set", "strategy direct"
    ),
    # the sequence scheduler uses max(1, max_batch_size) candidate slots when it is 0; the render writes it
    Normalisation(
        "sequence_batching.oldest.max_candidate_sequences",
        "max(1, max_batch_size) when absent",
        "left out when absent; the render writes max(1, maxBatchSize)",
    ),
    # Triton finds each control by its kind; the render writes them in the order START, END, READY, CORRID
    Normalisation(
        "sequence_batching.control_input", "any order", "written in the order start, end, ready, CORRID"
    ),
    # NormalizeModelConfig's default version policy
    Normalisation(
        "version_policy",
        "latest { num_versions: 1 }",
        "not reported when the config spells out the default",
        same_as="latest { num_versions: 1 }",
    ),
    # NormalizeModelConfig enables pinned memory for the inputs and outputs unless the config says otherwise
    Normalisation(
        "optimization.input_pinned_memory",
        "enable: true",
        "not reported when the config spells out the default",
        same_as="enable: true",
    ),
    Normalisation(
        "optimization.output_pinned_memory",
        "enable: true",
        "not reported when the config spells out the default",
        same_as="enable: true",
    ),
    # the render's steps always call the latest version
    Normalisation(
        "ensemble_scheduling.step[*].model_version",
        "-1 (latest)",
        "-1 is carried by leaving the step's version out, another as the step's version",
    ),
    # the render names each intermediate tensor after its pipeline output, input or STEP.TENSOR and maps only
    # the outputs something reads; a tensor read by several consumers goes through a generated router
    Normalisation(
        "ensemble_scheduling.step[*].input_map, output_map",
        "the same dataflow",
        "intermediate tensor names are not kept; output_map entries nothing reads are left out",
    ),
    # the render declares each ensemble output with its producer's type and shape
    Normalisation(
        "output[*].data_type, dims, reshape (ensembles)",
        "the producing step output's",
        "not reported when the config declares the same",
    ),
    # GPU indices need that many GPUs in the pod (spec.server.gpus, default 1)
    Normalisation(
        "instance_group[*].gpus",
        "GPU indices",
        "spec.server.gpus is set to the highest index + 1 when above 1",
    ),
)
DEFAULTS = {n.field: n.default for n in NORMALISATIONS if n.default is not None}
SAME_AS = {n.field: n.same_as for n in NORMALISATIONS if n.same_as is not None}

# Triton's AutoCompleteBackendFields (core, model_config_utils.cc): with neither backend nor platform in
# the config, the backend follows from default_model_filename, else from what the model's first version
# directory (the first subdirectory in byte order) holds: the first match in this order (Triton checks
# model.savedmodel before model.graphdef and lets the later win, so graphdef comes first here):
# (file name, spec field, value, True: must be a directory / False: a file / None: either).
MODEL_FILES: tuple[tuple[str, str, str, bool | None], ...] = (
    ("model.graphdef", "platform", "tensorflow_graphdef", False),
    ("model.savedmodel", "platform", "tensorflow_savedmodel", True),
    ("model.plan", "platform", "tensorrt_plan", False),
    ("model.onnx", "platform", "onnxruntime_onnx", None),
    ("model.xml", "backend", "openvino", None),
    ("model.pt", "platform", "pytorch_libtorch", False),
    ("model.py", "backend", "python", None),
)

MODEL_FILE_NAMES = ", ".join(name for name, *_ in MODEL_FILES)  # for messages

# ... and when none matches, with neither backend, platform nor default_model_filename given, a model named
# `model.<backend>` runs on <backend>, and Triton sets default_model_filename `model.<backend>`: carried in
# extraConfig, as the render names the backend and Triton then sets nothing (the same as the backend's own
# default only for these: DALI's is model.dali)
CUSTOM_BACKEND_SEPARATOR = "."
OWN_DEFAULT_IS_MODEL_DOT_BACKEND = frozenset({"dali"})

# a model directory's first subdirectory in byte order, and its entries (name -> is a directory)
VersionFiles = tuple[str, Mapping[str, bool]]
# the Python files of the version directory Triton loads (file name -> text)
PythonFiles = Mapping[str, str]


def _same(value: Any) -> Any:
    return value


def spec_data_type(value: int) -> str:
    """TYPE_FP32 -> FP32 (TYPE_STRING -> STRING, as the spec names it)."""
    return str(mc.DataType.Name(value)).removeprefix("TYPE_")


def _kind(value: int) -> str:
    return str(mc.ModelInstanceGroup.Kind.Name(value)).removeprefix("KIND_")


def ints(value: Any) -> list[int]:
    return [int(v) for v in value]


def _count(value: int) -> int:
    return max(1, int(value))


def _format(value: int) -> str:
    return str(mc.ModelInput.Format.Name(value)).removeprefix("FORMAT_")


def _timeout_action(value: int) -> str:
    return str(mc.ModelQueuePolicy.TimeoutAction.Name(value))


def _float32(value: float) -> float:
    """A float field as the config writes it (protobuf keeps 32 bits: 0.1 reads 0.10000000149...)."""
    return float(f"{value:.7g}")


def _strs(value: Any) -> list[str]:
    return [str(v) for v in value]


def _shape(value: Any) -> list[int]:
    """A reshape message as its shape (`[]` is a shape: one value per batch item)."""
    return ints(value.shape)


@dataclass(frozen=True)
class Carry:
    """One Triton field carried by one spec field."""

    triton: str  # the field below the section's message (dots for nested messages)
    spec: str  # the spec field, as the YAML spells it
    convert: Callable[[Any], Any] = _same
    always: bool = False  # written even when it equals the spec's default (required fields; readability)


TENSOR_FIELDS = (
    Carry("name", "name", str, always=True),
    Carry("data_type", "dataType", spec_data_type, always=True),
    Carry("dims", "dims", ints, always=True),
)
INPUT_FIELDS = (
    *TENSOR_FIELDS,
    Carry("optional", "optional", bool),
    Carry("format", "format", _format),
    Carry("reshape", "reshape", _shape),
    Carry("allow_ragged_batch", "allowRaggedBatch", bool),
    Carry("is_shape_tensor", "isShapeTensor", bool),
)
OUTPUT_FIELDS = (
    *TENSOR_FIELDS,
    Carry("reshape", "reshape", _shape),
    Carry("label_filename", "labelFilename", str),
    Carry("is_shape_tensor", "isShapeTensor", bool),
)
PIPELINE_INPUT_FIELDS = (*TENSOR_FIELDS, Carry("optional", "optional", bool))
MODEL_FIELDS = (
    Carry("max_batch_size", "maxBatchSize", int),
    Carry(POLICY_FIELD, "decoupled", bool),
)
INSTANCE_FIELDS = (
    Carry("name", "name", str),
    Carry("kind", "kind", _kind, always=True),
    Carry("count", "count", _count, always=True),
    Carry("gpus", "gpus", ints),
    Carry("profile", "profile", _strs),
    Carry("passive", "passive", bool),
    Carry("host_policy", "hostPolicy", str),
)
RATE_LIMITER_FIELDS = (Carry("priority", "priority", int),)
RESOURCE_FIELDS = (
    Carry("name", "name", str, always=True),
    Carry("global", "global", bool),
    Carry("count", "count", int),
)
DYNAMIC_BATCHING_FIELDS = (
    Carry("preferred_batch_size", "preferredBatchSizes", ints),
    Carry("max_queue_delay_microseconds", "maxQueueDelayMicroseconds", int),
    Carry("preserve_ordering", "preserveOrdering", bool),
    Carry("priority_levels", "priorityLevels", int),
    Carry("default_priority_level", "defaultPriorityLevel", int),
)
QUEUE_POLICY_FIELDS = (
    Carry("timeout_action", "timeoutAction", _timeout_action),
    Carry("default_timeout_microseconds", "defaultTimeoutMicroseconds", int),
    Carry("allow_timeout_override", "allowTimeoutOverride", bool),
    Carry("max_queue_size", "maxQueueSize", int),
)
VERSION_POLICY_FIELDS = (
    Carry("latest.num_versions", "numVersions", int),
    Carry("specific.versions", "versions", ints),
)
SEQUENCE_FIELDS = (
    Carry("max_sequence_idle_microseconds", "maxSequenceIdleMicroseconds", int),
    Carry("iterative_sequence", "iterativeSequence", bool),
)
OLDEST_FIELDS = (
    Carry("max_candidate_sequences", "maxCandidateSequences", int),
    Carry("preferred_batch_size", "preferredBatchSizes", ints),
    Carry("max_queue_delay_microseconds", "maxQueueDelayMicroseconds", int),
    Carry("preserve_ordering", "preserveOrdering", bool),
)
DIRECT_FIELDS = (
    Carry("max_queue_delay_microseconds", "maxQueueDelayMicroseconds", int),
    Carry("minimum_slot_utilization", "minimumSlotUtilization", _float32),
)
STATE_FIELDS = (
    Carry("input_name", "inputName", str, always=True),
    Carry("output_name", "outputName", str, always=True),
    Carry("data_type", "dataType", spec_data_type, always=True),
    Carry("dims", "dims", ints, always=True),
    Carry("use_same_buffer_for_input_output", "useSameBufferForInputOutput", bool),
    Carry("use_growable_memory", "useGrowableMemory", bool),
)
INITIAL_STATE_FIELDS = (  # Triton takes one initial_state per state: the spec's initialState
    Carry("name", "name", str, always=True),
    Carry("data_type", "dataType", spec_data_type, always=True),
    Carry("dims", "dims", ints, always=True),
    Carry("zero_data", "zeroData", bool),
    Carry("data_file", "dataFile", str),
)
CONTROL = mc.ModelSequenceBatching.Control
BOOLEAN_CONTROLS = {
    CONTROL.CONTROL_SEQUENCE_START: "start",
    CONTROL.CONTROL_SEQUENCE_END: "end",
    CONTROL.CONTROL_SEQUENCE_READY: "ready",
}
CORRID_CONTROL = "correlationId"
# START/END/READY: the false/true list the render writes for each flag data type (Controls.flagDataType)
FLAG_VALUES = {
    "int32_false_true": ("INT32", [0, 1]),
    "fp32_false_true": ("FP32", [0.0, 1.0]),
    "bool_false_true": ("BOOL", [False, True]),
}
FLAG_TYPE, CORRID_TYPE = "flagDataType", "correlationIdDataType"  # Controls' data type fields
