"""Import a Triton model repository as one TritonPipeline: config texts in, a document and findings out.

Pure (no file I/O, no printing): `import_repository` takes each model directory's config.pbtxt text and
the directories without one; `cli.import_.execute` reads the repository, prints the findings and writes the
YAML (`document_yaml`).

What is carried: one small function per config section, reading the Triton field -> spec field tables
(`Carry` rows in the `*_FIELDS` constants), so a field the spec gains is one row there (a row naming a
field the spec does not have raises). Everything else a parsed config
holds is found by a walk of the protobuf message (`ListFields()`, recursively) against the fields the
mapper took, and reported as a NOT_CARRIED finding (`MODEL: field: why`): a field Triton adds later is
reported, never dropped. Values Triton treats exactly like what the render writes are not reported;
NORMALISATIONS lists each of them, in one place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

import yaml
from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel

from ..errors import Problem, SpecError
from ..settings import API_VERSION, KIND
from ..spec import (
    DECOUPLED_BACKENDS,
    PLATFORM_BACKEND,
    Controls,
    DynamicBatching,
    InputTensor,
    Instance,
    Model,
    OutputTensor,
    Pipeline,
    PipelineInput,
    Platform,
    PriorityQueuePolicy,
    QueuePolicy,
    RateLimiter,
    RateLimiterResource,
    SequenceBatching,
    State,
    VersionPolicy,
    parse_pipeline,
)
from ..yamltext import STR_TAG, PlainDumper, str_style
from . import compile_pipeline
from .autocomplete import POLICY_FIELD, PYTHON_MODEL_FILE, SET_POLICY, complete, completion
from .plan import ensemble_output
from .plan_types import INPUTS, LATEST_VERSION, Tensor, full_dims
from .triton_config import SPEC_RENDERED, mc, parse_text, to_text

ERROR, NOT_CARRIED, WARNING = "error", "not carried", "warning"
COMPLETED = "completed"  # carried from what a model.py's auto_complete_config sets (a note, not a problem)
CONFIG = "config.pbtxt"
ENSEMBLE_PLATFORM = "ensemble"
VALUE_LIMIT = 100  # the most characters of a config value quoted in a finding

# --------------------------------------------------------------------------- messages

NO_CONFIGS = "not a Triton model repository: no <model>/config.pbtxt under {dir}"
TEMPLATE_HINT = (
    "a ${...} template placeholder stands where the text format needs a number, boolean or enum: fill "
    "the template first, e.g. with tools/fill_template.py"
)
TEMPLATE_MORE = " (placeholders stand for values on lines {lines} too)"
PLACEHOLDER_VALUE = re.compile(r"^[^\"#]*:\s*\[?\s*\$\{")  # `field: ${name}` outside a string
UNKNOWN_FIELD_HINT = (
    "(a field that Triton's model_config.proto, as this tritonpipeline carries it, does not know)"
)
NAME_MISMATCH = "{name!r} differs from its directory {dir!r}: Triton refuses to load the model"
NO_BACKEND = (
    "neither backend nor platform is set, and {why}; add backend (such as python) or platform (such as "
    "onnxruntime_onnx) to the config"
)
NO_MODEL_FILE = (
    "the model directory's first subdirectory, {subdir!r}, holds none of the model files Triton picks a "
    "backend by ({files})"
)
NO_VERSION_DIR = "the model directory has no version directory whose model file Triton could pick it by"
NO_MODEL_FILE_NAMED = (
    "default_model_filename {given!r} is none of the model files Triton picks a backend by ({files})"
)
BACKEND_MISMATCH = "{backend!r} does not go with platform {platform!r}: only the platform is written"
UNKNOWN_STEP_MODEL = "model {model!r} is not in the repository (models: {known})"
NESTED_CYCLE = "ensemble {model!r} calls itself through {route}: Triton refuses such an ensemble"
TWO_PRODUCERS = "ensemble tensor {tensor!r} is also written by {first}"
PRODUCED_INPUT = "ensemble tensor {tensor!r} is an ensemble input: a step cannot write it"
UNPRODUCED_TENSOR = "ensemble tensor {tensor!r}: no step produces it and no ensemble input provides it"
UNPRODUCED_OUTPUT = "ensemble output {tensor!r}: no step writes it"
NOT_IN_SPEC = "not in the TritonPipeline spec (set to {value})"
NO_CONFIG_VERSIONS = (
    "no config.pbtxt, and {why}: Triton cannot pick a backend for it and fails to load it; left out (write "
    "its config.pbtxt, naming the backend or platform)"
)
NO_CONFIG_CARRIED = (
    "no config.pbtxt: carried as Triton loads it, completing an empty config: {field} {value} by {file}, "
    "the rest as the backend completes it at load time (Triton's auto-complete, on unless server.args "
    "turns it off; a tritonserver that loaded the model shows the completed config at "
    "GET /v2/models/{model}/config)"
)
# what a Python model's auto_complete_config sets (autocomplete.py), where import cannot carry it
COMPLETION_UNREAD = (
    "{file}'s auto_complete_config calls {call} (line {line}) with a value it computes, or under a "
    "condition: import cannot read what it sets; declare it on the model (a tritonserver that loaded the "
    "model shows it at GET /v2/models/{model}/config), as a step maps only declared tensors and its model "
    "is rendered with the transaction policy the spec declares"
)
COMPLETED_FROM = (
    "{what}: as {file}'s auto_complete_config sets them when Triton loads the model (read, not run)"
)
COMPLETION_REFUSED = (
    "{file}'s auto_complete_config ({call}) contradicts the config: {why}; Triton refuses to load the model"
)
# a config's explicit `decoupled: false` on a model no ensemble step runs, where its backend completes it
# decoupled: the render writes such a model's policy only when decoupled (triton_config.model_config)
POLICY_LEFT_TO_BACKEND = (
    "decoupled: false is left to the backend, which makes the model decoupled ({how}): a model no ensemble "
    "step runs is rendered without a transaction policy unless decoupled, so it loads decoupled, where "
    "Triton refuses this config{why}"
)
PARTIAL_TENSOR = (
    "{name!r} without {missing}: left for the backend to complete when Triton loads the model (Triton "
    "refuses it otherwise), the spec needs it (a tritonserver that loaded the model shows it at "
    "GET /v2/models/{model}/config); declare it, or leave all of the model's inputs and outputs out"
)
NO_CONFIG_MISPLACED = (
    "no config.pbtxt, but {found}: Triton reads only {dir}/config.pbtxt and ignores that one; move it up "
    "to {dir}/config.pbtxt and import again"
)
NO_CONFIG_NO_VERSIONS = (
    "no config.pbtxt and no version directory: not a model (Triton would fail to load it); left out"
)
NESTED_VERSION = (
    "{version}: the call of ensemble {model!r} is carried as that ensemble's steps, which call the "
    "versions its own config names"
)
# what Triton refuses in an ensemble's config (core's ValidateModelConfig, ValidateEnsembleSchedulingConfig)
ENSEMBLE_REFUSES = {
    "backend": "Ensemble model '{name}' must have platform type 'ensemble' and empty backend type",
    "instance_group": "instance group should not be specified for ensemble '{name}'",
    "optimization": "optimization should not be specified for ensemble '{name}'",
    "model_warmup": "model_warmup can not be specified for ensemble '{name}'",
}
ENSEMBLE_FIELD = "an ensemble takes no {field}: Triton refuses the config ('{words}')"
CONTROL_NOT_CARRIED = (
    "{name!r} as {control}: the spec carries START, END and READY as false/true {flags} and CORRID as "
    "{corrids}"
)
CONTROL_MIXED = (
    "{name!r} as {control}: the spec gives START, END and READY one data type ({first}, as {where})"
)
CONTROL_TWICE = (
    "a second {kind} control (the first is {first}): Triton refuses the config ('sequence batching "
    "specifies multiple {kind} tensors')"
)
CONTROL_REFUSED = "{name!r} as {control}: Triton refuses the config ('{words}')"
# Triton's words for the controls it refuses (core's Get*SequenceControlProperties)
_LISTS = "'int32_false_true', 'fp32_false_true' or 'bool_false_true'"
TRITON_FLAG_WITHOUT_VALUES = f"sequence batching must specify either {_LISTS}"
TRITON_FLAG_WITH_TWO_LISTS = (
    f"sequence batching specifies more than one from {_LISTS.replace(' or ', ' and ')}"
)
TRITON_FLAG_VALUES_NOT_TWO = "sequence batching control '{field}' must have exactly 2 entries"
TRITON_CORRID_WITH_VALUES = f"sequence batching must not specify either {_LISTS}"
DUPLICATE_OUTPUT = "ensemble output {name!r} is listed again (first as output[{first}]): written once"
ENSEMBLE_OUTPUT_DECLARED = (
    "{value}: the spec takes an ensemble output's {what} from the step output that writes it "
    "({source}: {derived})"
)
SPEC_PROBLEM = "{message}"
SPEC_PATH = "{message} (at {path})"
COMPILE_PROBLEM = "{message} (tritonpipeline validate refuses the result until this is fixed)"

# --------------------------------------------------------------------------- normalisations


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
# it; the round trip in tests/test_import.py compares the configs after applying exactly these.
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
_DEFAULTS = {n.field: n.default for n in NORMALISATIONS if n.default is not None}
_SAME_AS = {n.field: n.same_as for n in NORMALISATIONS if n.same_as is not None}

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

# --------------------------------------------------------------------------- Triton field -> spec field


def _same(value: Any) -> Any:
    return value


def _data_type(value: int) -> str:
    """TYPE_FP32 -> FP32 (TYPE_STRING -> STRING, as the spec names it)."""
    return str(mc.DataType.Name(value)).removeprefix("TYPE_")


def _kind(value: int) -> str:
    return str(mc.ModelInstanceGroup.Kind.Name(value)).removeprefix("KIND_")


def _ints(value: Any) -> list[int]:
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
    return _ints(value.shape)


@dataclass(frozen=True)
class Carry:
    """One Triton field carried by one spec field."""

    triton: str  # the field below the section's message (dots for nested messages)
    spec: str  # the spec field, as the YAML spells it
    convert: Callable[[Any], Any] = _same
    always: bool = False  # written even when it equals the spec's default (required fields; readability)


TENSOR_FIELDS = (
    Carry("name", "name", str, always=True),
    Carry("data_type", "dataType", _data_type, always=True),
    Carry("dims", "dims", _ints, always=True),
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
    Carry("gpus", "gpus", _ints),
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
    Carry("preferred_batch_size", "preferredBatchSizes", _ints),
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
    Carry("specific.versions", "versions", _ints),
)
SEQUENCE_FIELDS = (
    Carry("max_sequence_idle_microseconds", "maxSequenceIdleMicroseconds", int),
    Carry("iterative_sequence", "iterativeSequence", bool),
)
OLDEST_FIELDS = (
    Carry("max_candidate_sequences", "maxCandidateSequences", int),
    Carry("preferred_batch_size", "preferredBatchSizes", _ints),
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
    Carry("data_type", "dataType", _data_type, always=True),
    Carry("dims", "dims", _ints, always=True),
    Carry("use_same_buffer_for_input_output", "useSameBufferForInputOutput", bool),
    Carry("use_growable_memory", "useGrowableMemory", bool),
)
INITIAL_STATE_FIELDS = (  # Triton takes one initial_state per state: the spec's initialState
    Carry("name", "name", str, always=True),
    Carry("data_type", "dataType", _data_type, always=True),
    Carry("dims", "dims", _ints, always=True),
    Carry("zero_data", "zeroData", bool),
    Carry("data_file", "dataFile", str),
)
_CONTROL = mc.ModelSequenceBatching.Control
BOOLEAN_CONTROLS = {
    _CONTROL.CONTROL_SEQUENCE_START: "start",
    _CONTROL.CONTROL_SEQUENCE_END: "end",
    _CONTROL.CONTROL_SEQUENCE_READY: "ready",
}
CORRID_CONTROL = "correlationId"
# START/END/READY: the false/true list the render writes for each flag data type (Controls.flagDataType)
FLAG_VALUES = {
    "int32_false_true": ("INT32", [0, 1]),
    "fp32_false_true": ("FP32", [0.0, 1.0]),
    "bool_false_true": ("BOOL", [False, True]),
}
FLAG_TYPE, CORRID_TYPE = "flagDataType", "correlationIdDataType"  # Controls' data type fields

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Finding:
    """One thing to tell the user: an ERROR (nothing is written), a setting NOT_CARRIED, or a WARNING."""

    kind: str
    model: str  # the model (directory) it concerns; "" for the repository or the document
    field: str  # Triton config field path such as input[3].reshape; "" for the whole config
    message: str
    position: tuple[int, int] | None = None  # (line, column) in a config that does not parse

    def __str__(self) -> str:
        return ": ".join(part for part in (self.model, self.field, self.message) if part)


@dataclass(frozen=True)
class ImportResult:
    document: dict[str, Any] | None  # None when any finding is an ERROR
    findings: tuple[Finding, ...]

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]


@dataclass
class _Reading:
    """One config being mapped: what the mapper took, where each spec field came from, what it found."""

    model: str
    taken: set[str] = field(default_factory=set)  # Triton field paths carried, with all below them
    seen: set[str] = field(default_factory=set)  # messages whose presence is carried; their fields are walked
    origin: dict[str, str] = field(default_factory=dict)  # spec path (relative) -> Triton field path
    findings: list[Finding] = field(default_factory=list)

    def take(self, path: str, spec_path: str | None = None) -> None:
        self.taken.add(path)
        self.seen.update(_parents(path))
        if spec_path is not None:
            self.origin[spec_path] = path

    def see(self, path: str, spec_path: str | None = None) -> None:
        self.seen.update([path, *_parents(path)])
        if spec_path is not None:
            self.origin[spec_path] = path

    def touched(self, path: str) -> bool:
        """Whether the mapper took or saw anything at or below `path`."""
        if path in self.seen or path in self.taken:
            return True
        return any(p.startswith((path + ".", path + "[")) for p in (*self.taken, *self.seen))

    def add(self, kind: str, path: str, message: str) -> None:
        self.findings.append(Finding(kind, self.model, path, message))


def _parents(path: str) -> list[str]:
    """'a.b[2].c' -> ['a', 'a.b', 'a.b[2]']."""
    return [path[: m.start()] for m in re.finditer(r"\.|\[", path) if m.start() > 0]


def _pattern(path: str) -> str:
    return re.sub(r"\[\d+\]", "[*]", path)


# --------------------------------------------------------------------------- protobuf helpers


def _has(msg: Message, name: str) -> bool:
    fd = msg.DESCRIPTOR.fields_by_name[name]
    if fd.is_repeated:
        return len(getattr(msg, name)) > 0
    if fd.type == FieldDescriptor.TYPE_MESSAGE or fd.has_presence:
        return msg.HasField(name)
    return bool(getattr(msg, name) != fd.default_value)


def _get(msg: Message, dotted: str) -> tuple[Any, bool]:
    """The value at a dotted field path below `msg`, and whether the config sets it."""
    *parents, last = dotted.split(".")
    for part in parents:
        if not msg.HasField(part):
            return None, False
        msg = getattr(msg, part)
    return getattr(msg, last), _has(msg, last)


def _one_line(msg: Message) -> str:
    """A message in the text format on one line; an empty one with a single (repeated) field, such as
    `reshape { shape: [] }`, as that field left empty, since that is how configs write it."""
    text = text_format.MessageToString(msg, as_one_line=True).strip()
    fields = msg.DESCRIPTOR.fields
    if not text and len(fields) == 1 and fields[0].is_repeated:
        text = f"{fields[0].name}: []"
    return "{ " + text + " }" if text else "{}"


def _show(fd: FieldDescriptor, value: Any) -> str:
    """A config value as the text format writes it, on one line, bounded."""
    if fd.type == FieldDescriptor.TYPE_MESSAGE and fd.is_repeated and not isinstance(value, Message):
        text = "[" + ", ".join(_one_line(v) for v in value) + "]"
    elif isinstance(value, Message):
        text = _one_line(value)
    elif fd.is_repeated:
        text = "[" + ", ".join(_scalar(fd, v) for v in value) + "]"
    else:
        text = _scalar(fd, value)
    return text if len(text) <= VALUE_LIMIT else text[: VALUE_LIMIT - 3] + "..."


def _scalar(fd: FieldDescriptor, value: Any) -> str:
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return (
            str(fd.enum_type.values_by_number[value].name)
            if value in fd.enum_type.values_by_number
            else str(value)
        )
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _key(key: Any) -> str:
    return f"[{json.dumps(key, ensure_ascii=False)}]"


def _walk(msg: Message, prefix: str, r: _Reading) -> Iterator[tuple[str, str]]:
    """Every field set in `msg` that the mapper did not take: (field path, value shown), at the highest
    level nothing below which was taken (one line per untouched setting)."""
    for fd, value in msg.ListFields():
        path = prefix + fd.name
        if path in r.taken:
            continue
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            yield path, _show(fd, value)
        elif fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            for key in sorted(value):
                item_path = path + _key(key)
                if item_path in r.taken:
                    continue
                item = value[key]
                if isinstance(item, Message) and r.touched(item_path):
                    yield from _walk(item, item_path + ".", r)
                else:
                    yield item_path, _show(value_fd, item)
        elif fd.is_repeated:
            for i, item in enumerate(value):
                item_path = f"{path}[{i}]"
                if item_path in r.taken:
                    continue
                if r.touched(item_path):
                    yield from _walk(item, item_path + ".", r)
                else:
                    yield item_path, _one_line(item)
        elif r.touched(path):
            yield from _walk(value, path + ".", r)
        else:
            yield path, _show(fd, value)


def _report_rest(cfg: Message, r: _Reading) -> None:
    for path, shown in _walk(cfg, "", r):
        r.add(NOT_CARRIED, path, NOT_IN_SPEC.format(value=shown))


# --------------------------------------------------------------------------- spec field helpers


def _spec_field(owner: type[BaseModel], alias: str) -> Any:
    """The pydantic field of `owner` spelled `alias` in the YAML (a table row naming another is a bug)."""
    found = next((f for n, f in owner.model_fields.items() if (f.alias or n) == alias), None)
    if found is None:
        raise KeyError(f"{owner.__name__} has no field {alias!r}")
    return found


def _copy(
    r: _Reading, msg: Message, rows: Sequence[Carry], owner: type[BaseModel], triton: str, spec: str
) -> dict[str, Any]:
    """The spec fields of `owner` that the `rows` carry from `msg` (at Triton path prefix `triton`, spec
    path prefix `spec`); defaults left out unless a row says `always`."""
    out: dict[str, Any] = {}
    for row in rows:
        spec_field = _spec_field(owner, row.spec)
        path = triton + row.triton
        r.seen.update(_parents(path))  # a message holding only defaults of carried fields is carried too
        raw, present = _get(msg, row.triton)
        if present:
            value = row.convert(raw)
            r.take(path)
        elif _pattern(path) in _DEFAULTS:
            value = _DEFAULTS[_pattern(path)]
        elif row.always:
            value = row.convert(raw)
        else:
            continue
        if not row.always and not spec_field.is_required() and value == spec_field.default:
            continue
        out[row.spec] = value
        r.origin[f"{spec}.{row.spec}" if spec else row.spec] = path
    return out


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The spec class of a field such as `InitialState | None`."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _spec_order(entry: dict[str, Any], owner: type[BaseModel]) -> dict[str, Any]:
    """`entry`'s keys in the order the spec declares its fields (readable, stable)."""
    order = {(f.alias or n): i for i, (n, f) in enumerate(owner.model_fields.items())}
    return dict(sorted(entry.items(), key=lambda kv: order.get(kv[0], len(order))))


def _same_as_defaults(cfg: Message, r: _Reading) -> None:
    """Take the messages that spell out exactly Triton's default (NORMALISATIONS' same_as)."""
    for path, text in _SAME_AS.items():
        value, present = _get(cfg, path)
        if present and isinstance(value, Message):
            default = type(value)()
            text_format.Parse(text, default)
            if value == default:
                r.take(path)


# --------------------------------------------------------------------------- models


def _model(
    cfg: Any,
    r: _Reading,
    version_files: VersionFiles | None,
    python_files: PythonFiles | None = None,
    *,
    run_by_step: bool = False,
) -> dict[str, Any]:
    """The spec's model entry of one (non-ensemble) config; `version_files`: its first subdirectory and
    what that holds, None when it has none; `python_files`: the Python files of the version Triton
    loads; `run_by_step`: an ensemble step runs the model. A config without inputs or outputs (the
    backend completes them when Triton loads it) is carried without them."""
    entry: dict[str, Any] = {"name": cfg.name}
    r.take("name", "name")
    entry.update(_backend(cfg, r, version_files))
    if entry.get("backend") == "python":  # the config as the Python backend completes it
        _complete(cfg, r, python_files or {}, run_by_step=run_by_step)
    entry.update(_copy(r, cfg, MODEL_FIELDS, Model, "", ""))
    backend = entry.get("backend")
    if backend in DECOUPLED_BACKENDS and not cfg.HasField("model_transaction_policy"):
        entry["decoupled"] = True  # as the backend completes it when Triton loads the model
    elif backend in DECOUPLED_BACKENDS and not cfg.model_transaction_policy.decoupled and not run_by_step:
        how = f"backend {backend!r}: {DECOUPLED_BACKENDS[backend]}"
        r.add(NOT_CARRIED, POLICY_FIELD, POLICY_LEFT_TO_BACKEND.format(how=how, why=""))
    whole = {kind: _whole_tensors(cfg, kind, r) for kind in ("input", "output")}
    if cfg.input:
        entry["inputs"] = [
            _spec_order(_copy(r, t, INPUT_FIELDS, InputTensor, f"input[{i}].", f"inputs[{i}]"), InputTensor)
            for i, t in whole["input"]
        ]
    if cfg.output:
        entry["outputs"] = [
            _spec_order(
                _copy(r, t, OUTPUT_FIELDS, OutputTensor, f"output[{i}].", f"outputs[{i}]"), OutputTensor
            )
            for i, t in whole["output"]
        ]
    for i in range(len(cfg.input)):
        r.origin[f"inputs[{i}]"] = f"input[{i}]"
    for i in range(len(cfg.output)):
        r.origin[f"outputs[{i}]"] = f"output[{i}]"
    if cfg.instance_group:
        entry["instances"] = [_instance(g, i, r) for i, g in enumerate(cfg.instance_group)]
    if cfg.HasField("dynamic_batching"):
        r.see("dynamic_batching", "dynamicBatching")
        entry["dynamicBatching"] = _spec_order(
            _copy(
                r,
                cfg.dynamic_batching,
                DYNAMIC_BATCHING_FIELDS,
                DynamicBatching,
                "dynamic_batching.",
                "dynamicBatching",
            ),
            DynamicBatching,
        )
        entry["dynamicBatching"].update(_queue_policies(cfg.dynamic_batching, r))
    if cfg.HasField("version_policy"):
        policy = _version_policy(cfg.version_policy, r)
        if policy is not None:
            entry["versionPolicy"] = policy
    if cfg.HasField("sequence_batching"):
        entry["sequenceBatching"] = _sequence_batching(cfg.sequence_batching, r)
    if cfg.parameters:
        entry["parameters"] = _parameters(cfg, r)
    _same_as_defaults(cfg, r)
    entry.update(_extra_config(cfg, r))
    return _spec_order(entry, Model)


def _extra_config(cfg: Any, r: _Reading) -> dict[str, str]:
    """extraConfig: each field of the config that the spec's own fields do not render, whole, where it
    holds anything more than NORMALISATIONS' defaults (the fields below the rendered ones that the spec
    does not carry stay NOT_CARRIED findings)."""
    left = {re.split(r"[.\[]", path, maxsplit=1)[0] for path, _ in _walk(cfg, "", r)}
    extra = type(cfg)()
    extra.CopyFrom(cfg)
    for fd, _ in extra.ListFields():
        if fd.name in SPEC_RENDERED or fd.name not in left:
            extra.ClearField(fd.name)
        else:
            r.take(fd.name, "extraConfig")
    return {"extraConfig": to_text(extra).decode()} if extra.ListFields() else {}


def _complete(cfg: Any, r: _Reading, files: PythonFiles, *, run_by_step: bool) -> None:
    """Complete a Python model's config with what its auto_complete_config sets, as the Python backend
    does when Triton loads it (autocomplete.complete). What cannot be read, or what the backend would
    refuse, is a WARNING; a `decoupled: false` it contradicts on a model no step runs is NOT_CARRIED (the
    render leaves that model's policy to the backend)."""
    name = str(cfg.default_model_filename) or PYTHON_MODEL_FILE
    source = files.get(name)
    done = completion(source) if source is not None else None
    if done is None:
        return
    for call, line in done.unread:
        r.add(WARNING, "", COMPLETION_UNREAD.format(file=name, call=call, line=line, model=cfg.name))
    before = type(cfg)()
    before.CopyFrom(cfg)
    for refused in complete(cfg, done):
        why = refused.why + (f" (line {done.policy_line})" if refused.call == SET_POLICY else "")
        if refused.field == POLICY_FIELD and done.decoupled and not run_by_step:
            how = f"{name}'s auto_complete_config, line {done.policy_line}"
            r.add(NOT_CARRIED, refused.field, POLICY_LEFT_TO_BACKEND.format(how=how, why=f": {refused.why}"))
            continue
        r.add(WARNING, refused.field, COMPLETION_REFUSED.format(file=name, call=refused.call, why=why))
    what = _completed_parts(before, cfg)
    if what:
        r.add(COMPLETED, "", COMPLETED_FROM.format(what="; ".join(what), file=name))


def _completed_parts(before: Any, after: Any) -> list[str]:
    """What completing a config changed, in words: the tensors added or filled in, and the settings."""
    parts = []
    for kind in ("input", "output"):
        old = {t.name: t for t in getattr(before, kind)}
        changed = [t.name for t in getattr(after, kind) if old.get(t.name) != t]
        if changed:
            parts.append(f"{kind}s {', '.join(changed)}")
    if after.max_batch_size != before.max_batch_size:
        parts.append(f"max_batch_size {after.max_batch_size}")
    if after.HasField("dynamic_batching") and not before.HasField("dynamic_batching"):
        parts.append("dynamic batching")
    if after.model_transaction_policy.decoupled and not before.model_transaction_policy.decoupled:
        parts.append("decoupled: true")
    return parts


def _whole_tensors(cfg: Any, kind: str, r: _Reading) -> list[tuple[int, Any]]:
    """The config's inputs or outputs (`kind`) with their index, each one naming a data type and dims;
    one that leaves either to the backend (DALI's partial auto-configuration) is an ERROR."""
    whole = []
    for i, t in enumerate(getattr(cfg, kind)):
        missing = [what for what, absent in (("data_type", not t.data_type), ("dims", not t.dims)) if absent]
        if missing:
            message = PARTIAL_TENSOR.format(name=str(t.name), missing=" and ".join(missing), model=cfg.name)
            r.add(ERROR, f"{kind}[{i}]", message)
        else:
            whole.append((i, t))
    return whole


def _queue_policies(db: Any, r: _Reading) -> dict[str, Any]:
    """The default queue policy and those of particular priority levels (Triton's map, the spec's list)."""
    prefix, spec = "dynamic_batching.", "dynamicBatching"
    out: dict[str, Any] = {}
    if db.HasField("default_queue_policy"):
        path = prefix + "default_queue_policy"
        r.see(path, f"{spec}.defaultQueuePolicy")
        found = _copy(r, db.default_queue_policy, QUEUE_POLICY_FIELDS, QueuePolicy, path + ".", spec)
        out["defaultQueuePolicy"] = _spec_order(found, QueuePolicy)
    policies = []
    for k, level in enumerate(sorted(db.priority_queue_policy)):
        path, at = f"{prefix}priority_queue_policy{_key(level)}", f"{spec}.priorityQueuePolicies[{k}]"
        r.see(path, at)
        found = _copy(r, db.priority_queue_policy[level], QUEUE_POLICY_FIELDS, QueuePolicy, path + ".", at)
        policies.append(_spec_order({"priorityLevel": int(level), **found}, PriorityQueuePolicy))
    if policies:
        out["priorityQueuePolicies"] = policies
    return out


def _version_policy(vp: Any, r: _Reading) -> dict[str, Any] | None:
    """Triton's version_policy; None for its default (latest 1), which the spec writes by leaving it out."""
    choice = vp.WhichOneof("policy_choice")
    if choice == "latest" and vp.latest.num_versions in (0, 1):
        return None  # the default: reported as a normalisation
    r.see("version_policy", "versionPolicy")
    r.see(f"version_policy.{choice}")
    found = _copy(r, vp, VERSION_POLICY_FIELDS, VersionPolicy, "version_policy.", "versionPolicy")
    return _spec_order({"policy": choice, **found}, VersionPolicy)


def _model_file_backend(cfg: Any, version_files: VersionFiles | None) -> tuple[dict[str, str], bool]:
    """The backend Triton picks for a config that names none ({} when it picks none), and whether by the
    model's name (`model.<backend>`) rather than by a model file (MODEL_FILES)."""
    given = str(cfg.default_model_filename)
    files = version_files[1] if version_files is not None else {}
    for name, key, value, is_dir in MODEL_FILES:
        if given == name or (not given and name in files and is_dir in (None, files[name])):
            return {key: value}, False
    _, dot, custom = str(cfg.name).partition(CUSTOM_BACKEND_SEPARATOR)
    if dot and custom and not given:
        return {"backend": custom}, True
    return {}, False


def _without_config(directory: str, version_files: VersionFiles | None) -> Finding | str:
    """A model directory without config.pbtxt, as Triton loads it (core's AutoCompleteBackendFields on an
    empty config named after the directory): the note that it is carried so, or why Triton cannot."""
    picked, by_name = _model_file_backend(mc.ModelConfig(name=directory), version_files)
    if not picked:
        if version_files is None:
            return NO_VERSION_DIR
        return NO_MODEL_FILE.format(subdir=version_files[0], files=MODEL_FILE_NAMES)
    ((key, value),) = picked.items()
    subdir = version_files[0] if version_files is not None else ""
    file = (
        f"its name {directory!r}"
        if by_name
        else next(f"{subdir}/{name}" for name, k, v, _ in MODEL_FILES if (k, v) == (key, value))
    )
    message = NO_CONFIG_CARRIED.format(field=key, value=value, file=file, model=directory)
    return Finding(COMPLETED, directory, "", message)


def _backend(cfg: Any, r: _Reading, version_files: VersionFiles | None) -> dict[str, str]:
    """backend or platform: the spec takes exactly one (Triton's pick by the model file when neither)."""
    platform, backend = str(cfg.platform), str(cfg.backend)
    known = platform in get_args(Platform)
    if platform and backend:
        if PLATFORM_BACKEND.get(platform) == backend:
            r.take("backend")
        elif known:
            r.take("backend")
            r.add(NOT_CARRIED, "backend", BACKEND_MISMATCH.format(backend=backend, platform=platform))
        else:  # a platform the spec does not know, with a backend it can carry
            r.take("backend", "backend")
            return {"backend": backend}
    if platform:
        r.take("platform", "platform")
        return {"platform": platform}
    if backend:
        r.take("backend", "backend")
        return {"backend": backend}
    picked, by_name = _model_file_backend(cfg, version_files)
    if picked:
        r.take("backend", next(iter(picked)))  # NORMALISATIONS: Triton picks the same by the same file
        custom = picked.get("backend", "")
        if by_name and custom not in OWN_DEFAULT_IS_MODEL_DOT_BACKEND:
            cfg.default_model_filename = f"model.{custom}"  # as Triton sets it; carried in extraConfig
        return picked
    files = MODEL_FILE_NAMES
    why = NO_VERSION_DIR
    if cfg.default_model_filename:
        why = NO_MODEL_FILE_NAMED.format(given=str(cfg.default_model_filename), files=files)
    elif version_files is not None:
        why = NO_MODEL_FILE.format(subdir=version_files[0], files=files)
    r.add(ERROR, "backend", NO_BACKEND.format(why=why))
    return {}


def _instance(group: Any, i: int, r: _Reading) -> dict[str, Any]:
    path = f"instance_group[{i}]"
    r.origin[f"instances[{i}]"] = path
    if group.name == f"{r.model}_{i}":  # Triton's own name for it
        r.take(f"{path}.name")
    out = _copy(r, group, INSTANCE_FIELDS, Instance, path + ".", f"instances[{i}]")
    if group.HasField("rate_limiter"):
        out["rateLimiter"] = _rate_limiter(group.rate_limiter, r, path + ".rate_limiter", f"instances[{i}]")
    return _spec_order(out, Instance)


def _rate_limiter(limiter: Any, r: _Reading, path: str, at: str) -> dict[str, Any]:
    """An instance group's rate limiter: its resources, and its priority."""
    spec = f"{at}.rateLimiter"
    r.see(path, spec)
    out = _copy(r, limiter, RATE_LIMITER_FIELDS, RateLimiter, path + ".", spec)
    resources = []
    for k, resource in enumerate(limiter.resources):
        rpath, rspec = f"{path}.resources[{k}]", f"{spec}.resources[{k}]"
        r.see(rpath, rspec)
        resources.append(_copy(r, resource, RESOURCE_FIELDS, RateLimiterResource, rpath + ".", rspec))
    if resources:
        out["resources"] = resources
    return _spec_order(out, RateLimiter)


def _sequence_batching(sb: Any, r: _Reading) -> dict[str, Any]:
    prefix, spec = "sequence_batching.", "sequenceBatching"
    r.see("sequence_batching", spec)
    out = _copy(r, sb, SEQUENCE_FIELDS, SequenceBatching, prefix, spec)
    if sb.HasField("oldest"):
        r.see(prefix + "oldest", spec + ".strategy")
        out["strategy"] = "oldest"
        out.update(_copy(r, sb.oldest, OLDEST_FIELDS, SequenceBatching, prefix + "oldest.", spec))
    elif sb.HasField("direct"):
        r.see(prefix + "direct", spec + ".strategy")
        out.update(_copy(r, sb.direct, DIRECT_FIELDS, SequenceBatching, prefix + "direct.", spec))
    controls = _controls(sb, r)
    if controls:
        out["controls"] = controls
        r.origin[spec + ".controls"] = prefix + "control_input"
    if sb.state:
        r.origin[spec + ".states"] = prefix + "state"
        out["states"] = [_state(st, k, r) for k, st in enumerate(sb.state)]
    return _spec_order(out, SequenceBatching)


def _state(st: Any, k: int, r: _Reading) -> dict[str, Any]:
    path, spec = f"sequence_batching.state[{k}]", f"sequenceBatching.states[{k}]"
    r.origin[spec] = path
    out = _copy(r, st, STATE_FIELDS, State, path + ".", spec)
    initial = _nested_model(_spec_field(State, "initialState").annotation)
    if initial is not None and len(st.initial_state) == 1:  # more than one: reported (Triton takes one)
        r.see(f"{path}.initial_state[0]", f"{spec}.initialState")
        found = _copy(
            r,
            st.initial_state[0],
            INITIAL_STATE_FIELDS,
            initial,
            f"{path}.initial_state[0].",
            f"{spec}.initialState",
        )
        out["initialState"] = _spec_order(found, initial)
    return _spec_order(out, State)


def _controls(sb: Any, r: _Reading) -> dict[str, str]:
    """START/END/READY with one of the false/true lists the render writes, all of one data type the spec
    knows, and CORRID of a data type the spec knows: the spec's controls; any other is reported."""
    flag_types = _literal_values(Controls, FLAG_TYPE) or ["INT32"]  # what the spec (as it is) carries
    corrid_types = _literal_values(Controls, CORRID_TYPE) or ["UINT64"]
    out: dict[str, str] = {}
    first: dict[str, str] = {}
    flag: tuple[str, str] | None = None  # (data type, where) of the first carried START/END/READY
    seen: dict[str, str] = {}  # Triton's control kind -> where the config first gives it
    for i, ci in enumerate(sb.control_input):
        path = f"sequence_batching.control_input[{i}]"
        for j, control in enumerate(ci.control):
            # a control input of one control is one setting: reported whole when not carried
            cpath = f"{path}.control[{j}]" if len(ci.control) > 1 else path
            r.take(cpath)
            shown = {"name": str(ci.name), "control": _one_line(control)}
            key, dtype = _control_type(control)
            refused = _control_refused(control)
            if refused:
                r.add(ERROR, cpath, CONTROL_REFUSED.format(**shown, words=refused))
                continue
            kind = str(_CONTROL.Kind.Name(control.kind))
            if kind in seen:
                r.add(ERROR, cpath, CONTROL_TWICE.format(kind=kind, first=seen[kind]))
                continue
            seen[kind] = cpath
            if key is None or dtype not in (flag_types if key != CORRID_CONTROL else corrid_types):
                message = CONTROL_NOT_CARRIED.format(
                    **shown, flags=_or(flag_types), corrids=_or(corrid_types)
                )
            elif key != CORRID_CONTROL and flag is not None and dtype != flag[0]:
                message = CONTROL_MIXED.format(**shown, first=flag[0], where=flag[1])
            else:
                out[key] = str(ci.name)
                first[key] = cpath
                r.take(f"{path}.name", f"sequenceBatching.controls.{key}")
                if key == CORRID_CONTROL:
                    out[CORRID_TYPE] = dtype
                elif flag is None:
                    flag = (dtype, cpath)
                    out[FLAG_TYPE] = dtype
                continue
            r.add(NOT_CARRIED, cpath, message)
        r.take(f"{path}.name")  # its controls are reported one by one
    for alias in (FLAG_TYPE, CORRID_TYPE):  # the spec's defaults are left out
        if alias in out and out[alias] == _spec_field(Controls, alias).default:
            del out[alias]
    return out


def _control_refused(control: Any) -> str | None:
    """Triton's words for a sequence control it refuses whatever the spec carries (core's
    GetBooleanSequenceControlProperties and GetTypedSequenceControlProperties); None when it takes it."""
    lists = [name for name in FLAG_VALUES if getattr(control, name)]
    if control.kind not in BOOLEAN_CONTROLS:
        return TRITON_CORRID_WITH_VALUES if lists else None
    if not lists:
        return TRITON_FLAG_WITHOUT_VALUES
    if len(lists) > 1:
        return TRITON_FLAG_WITH_TWO_LISTS
    if len(getattr(control, lists[0])) != 2:
        return TRITON_FLAG_VALUES_NOT_TWO.format(field=lists[0])
    return None


def _control_type(control: Any) -> tuple[str | None, str]:
    """A control's spec field and data type: ('start', 'INT32') for a START control with
    int32_false_true [0, 1], ('correlationId', 'UINT64') for a UINT64 CORRID; (None, '') otherwise."""
    lists = {name: list(getattr(control, name)) for name in FLAG_VALUES if getattr(control, name)}
    if control.kind in BOOLEAN_CONTROLS:
        if control.data_type or len(lists) != 1:
            return None, ""
        ((name, values),) = lists.items()
        dtype, wanted = FLAG_VALUES[name]
        return (BOOLEAN_CONTROLS[control.kind], dtype) if values == wanted else (None, "")
    if control.kind == _CONTROL.CONTROL_SEQUENCE_CORRID and not lists:
        return CORRID_CONTROL, _data_type(control.data_type)
    return None, ""


def _literal_values(owner: type[BaseModel], alias: str) -> list[str]:
    """The values a Literal spec field allows."""
    return [str(v) for v in get_args(_spec_field(owner, alias).annotation)]


def _or(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]


def _parameters(cfg: Any, r: _Reading) -> dict[str, str]:
    """string_value of each parameter, verbatim (template placeholders such as ${engine_dir} included)."""
    out: dict[str, str] = {}
    for key in sorted(cfg.parameters):
        path = f"parameters{_key(key)}.string_value"
        out[key] = str(cfg.parameters[key].string_value)
        r.take(path, f"parameters.{key}")
    return out


# --------------------------------------------------------------------------- ensembles


def _step_names(models: Sequence[str]) -> list[str]:
    """Each step's name: its model's, and `model_2`, `model_3`... for later calls of the same model; a
    '.' in a model's name becomes '_' (a step's name holds none: a reference is STEP.TENSOR)."""
    taken = {INPUTS, *models}
    names: list[str] = []
    for model in models:
        base = model.replace(".", "_")
        if base not in names and base != INPUTS and (base == model or base not in taken):
            names.append(base)
            taken.add(base)
            continue
        n = 2
        while True:
            suffix = f"_{n}"
            candidate = base[: 64 - len(suffix)] + suffix
            if candidate not in taken:
                break
            n += 1
        taken.add(candidate)
        names.append(candidate)
    return names


@dataclass(frozen=True)
class _FlatStep:
    """One step of an ensemble with the ensembles it calls inlined: a step of its own, or a step of a
    nested ensemble, its maps rewritten into the outer ensemble's tensors. `path` is the outer config's
    step that runs it (for an inlined step, the call of the nested ensemble)."""

    step: Any
    path: str


def _flat_steps(cfg: Any, ensembles: Mapping[str, Any], r: _Reading) -> list[_FlatStep]:
    """cfg's steps, each call of another ensemble replaced by that ensemble's steps (recursively), as
    Triton runs them: the nested ensemble's inputs are the tensors the call maps to them, its outputs the
    tensors the call maps them to, and its inner tensors get names of their own. Inlined steps that feed
    nothing the call maps are left out (their answers went nowhere)."""
    flat: list[_FlatStep] = []
    for j, step in enumerate(cfg.ensemble_scheduling.step):
        path = f"ensemble_scheduling.step[{j}]"
        model = str(step.model_name)
        if model not in ensembles:
            flat.append(_FlatStep(step, path))
            continue
        inner = _inlined(step, ensembles, (str(cfg.name), model), f"{j}/", r, path)
        flat += [_FlatStep(s, path) for s in (inner if inner is not None else [step])]
    return flat


def _inlined(
    call: Any, ensembles: Mapping[str, Any], route: tuple[str, ...], prefix: str, r: _Reading, path: str
) -> list[Any] | None:
    """The steps of ensemble route[-1] as called by `call`, maps rewritten (see _flat_steps); None, and
    an ERROR, when it calls itself (the call then stays, so that its outputs raise no errors of their own)."""
    nested = ensembles[route[-1]]
    if route[-1] in route[:-1]:
        cycle = route[route.index(route[-1]) :]
        r.add(ERROR, f"{path}.model_name", NESTED_CYCLE.format(model=route[-1], route=" -> ".join(cycle)))
        return None
    given = dict(call.input_map)  # nested input -> outer tensor
    wanted = dict(call.output_map)  # nested output -> outer tensor

    def outer(tensor: str) -> str:
        if tensor in given:
            return str(given[tensor])
        return str(wanted.get(tensor, f"{prefix}{tensor}"))

    known = {str(t.name) for t in nested.input}
    steps: list[Any] = []
    for k, step in enumerate(nested.ensemble_scheduling.step):
        copy = type(step)()
        copy.CopyFrom(step)
        copy.ClearField("input_map")
        copy.ClearField("output_map")
        for key, tensor in step.input_map.items():
            if tensor not in known or tensor in given:  # a nested input the call leaves out: unmapped
                copy.input_map[key] = outer(str(tensor))
        for key, tensor in step.output_map.items():
            copy.output_map[key] = outer(str(tensor))
        model = str(step.model_name)
        if model in ensembles:
            inner = _inlined(copy, ensembles, (*route, model), f"{prefix}{k}/", r, path)
            steps += inner if inner is not None else [copy]
        else:
            steps.append(copy)
    return _feeding(steps, set(wanted.values()))


def _feeding(steps: list[Any], results: set[str]) -> list[Any]:
    """The steps whose outputs reach `results`, directly or through other steps (in any listed order)."""
    needed, keep = set(results), [False] * len(steps)
    changed = True
    while changed:
        changed = False
        for i, step in enumerate(steps):
            if not keep[i] and needed & set(step.output_map.values()):
                keep[i] = changed = True
                needed |= set(step.input_map.values())
    return [step for i, step in enumerate(steps) if keep[i]]


def _pipeline(
    cfg: Any, r: _Reading, models: Mapping[str, Any], ensembles: Mapping[str, Any], unreadable: set[str]
) -> dict[str, Any]:
    """The spec's pipeline of one ensemble config, the ensembles it calls inlined (_flat_steps)."""
    entry: dict[str, Any] = {"name": cfg.name}
    r.take("name", "name")
    r.take("platform")
    for refused, words in ENSEMBLE_REFUSES.items():
        if _has(cfg, refused):
            r.take(refused)
            r.add(ERROR, refused, ENSEMBLE_FIELD.format(field=refused, words=words.format(name=cfg.name)))
    entry["maxBatchSize"] = int(cfg.max_batch_size)
    r.take("max_batch_size", "maxBatchSize")
    entry["inputs"] = [
        _spec_order(
            _copy(r, t, PIPELINE_INPUT_FIELDS, PipelineInput, f"input[{i}].", f"inputs[{i}]"), PipelineInput
        )
        for i, t in enumerate(cfg.input)
    ]
    for i in range(len(cfg.input)):
        r.origin[f"inputs[{i}]"] = f"input[{i}]"
    inputs = {str(t.name) for t in cfg.input}
    r.see("ensemble_scheduling")
    for j, call in enumerate(cfg.ensemble_scheduling.step):
        path = f"ensemble_scheduling.step[{j}]"
        r.take(f"{path}.model_name")
        r.take(f"{path}.input_map")
        r.take(f"{path}.output_map")
        r.take(f"{path}.model_version")
        _step_model(call, path, r, models, ensembles, unreadable)
        if call.model_version != LATEST_VERSION and call.model_name in ensembles:
            message = NESTED_VERSION.format(version=call.model_version, model=call.model_name)
            r.add(NOT_CARRIED, f"{path}.model_version", message)
    steps = _flat_steps(cfg, ensembles, r)
    names = _step_names([str(s.step.model_name) for s in steps])
    producers: dict[str, tuple[int, str]] = {}  # ensemble tensor -> (step index, model output)
    for j, flat in enumerate(steps):
        r.see(flat.path, f"steps[{j}]")
        r.origin[f"steps[{j}].model"] = f"{flat.path}.model_name"
        for out, tensor in sorted(flat.step.output_map.items()):
            where = f"{flat.path}.output_map{_key(out)}"
            if tensor in inputs:
                r.add(ERROR, where, PRODUCED_INPUT.format(tensor=tensor))
            elif tensor in producers:
                first = steps[producers[tensor][0]].path
                r.add(ERROR, where, TWO_PRODUCERS.format(tensor=tensor, first=first))
            else:
                producers[tensor] = (j, str(out))
    entry["steps"] = [_step(flat, j, names, inputs, producers, r, models) for j, flat in enumerate(steps)]
    entry["outputs"] = _pipeline_outputs(cfg, steps, names, producers, r, models)
    return _spec_order(entry, Pipeline)


def _step_model(
    step: Any,
    path: str,
    r: _Reading,
    models: Mapping[str, Any],
    ensembles: Mapping[str, Any],
    unreadable: set[str],
) -> None:
    model = str(step.model_name)
    if model not in models and model not in ensembles and model not in unreadable:
        known = ", ".join(sorted(models)) or "none"  # an unreadable config has its own error
        r.add(ERROR, f"{path}.model_name", UNKNOWN_STEP_MODEL.format(model=model, known=known))


def _step(
    flat: _FlatStep,
    j: int,
    names: list[str],
    inputs: set[str],
    producers: Mapping[str, tuple[int, str]],
    r: _Reading,
    models: Mapping[str, Any],
) -> dict[str, Any]:
    step, path = flat.step, flat.path
    out: dict[str, Any] = {}
    if names[j] != step.model_name:
        out["name"] = names[j]
    out["model"] = str(step.model_name)
    if step.model_version != LATEST_VERSION:
        out["version"] = int(step.model_version)
        r.origin[f"steps[{j}].version"] = f"{path}.model_version"
    model = models.get(str(step.model_name))
    order = {str(t.name): i for i, t in enumerate(model.input)} if model is not None else {}
    mapped: dict[str, str] = {}
    for key in sorted(step.input_map, key=lambda k: (order.get(k, len(order)), k)):
        tensor = step.input_map[key]
        where = f"{path}.input_map{_key(key)}"
        if tensor in inputs:
            mapped[key] = f"{INPUTS}.{tensor}"
        elif tensor in producers:
            k, output = producers[tensor]
            mapped[key] = f"{names[k]}.{output}"
        else:
            r.add(ERROR, where, UNPRODUCED_TENSOR.format(tensor=tensor))
            continue
        r.origin[f"steps[{j}].inputs.{key}"] = where
    out["inputs"] = mapped
    return out


def _pipeline_outputs(
    cfg: Any,
    steps: Sequence[_FlatStep],
    names: list[str],
    producers: Mapping[str, tuple[int, str]],
    r: _Reading,
    models: Mapping[str, Any],
) -> list[dict[str, str]]:
    outputs: list[dict[str, str]] = []
    first: dict[str, int] = {}
    batching = cfg.max_batch_size > 0
    for i, o in enumerate(cfg.output):
        path = f"output[{i}]"
        name = str(o.name)
        if name in first:
            r.take(path)
            r.add(NOT_CARRIED, path, DUPLICATE_OUTPUT.format(name=name, first=first[name]))
            continue
        first[name] = i
        r.take(f"{path}.name")
        if name not in producers:
            r.add(ERROR, f"{path}.name", UNPRODUCED_OUTPUT.format(tensor=name))
            continue
        j, output = producers[name]
        k = len(outputs)
        outputs.append({"name": name, "from": f"{names[j]}.{output}"})
        r.origin[f"outputs[{k}]"] = path
        r.origin[f"outputs[{k}].name"] = f"{path}.name"
        r.origin[f"outputs[{k}].from"] = f"{steps[j].path}.output_map{_key(output)}"
        model = models.get(str(steps[j].step.model_name))
        _declared_output(o, path, model, f"{names[j]}.{output}", batching, r)
    return outputs


def _declared_output(o: Any, path: str, model: Any, source: str, batching: bool, r: _Reading) -> None:
    """An ensemble output's data_type, dims and reshape: the render derives them from the producer; a
    declaration that says the same is carried, one that differs is reported."""
    produced = next((t for t in model.output if t.name == source.split(".", 1)[1]), None) if model else None
    if produced is None:  # the compiler names the missing output (a warning)
        r.take(path)
        return
    derived = ensemble_output(
        Tensor(_data_type(produced.data_type), full_dims(_ints(produced.dims), model.max_batch_size > 0)),
        batching,
    )
    declared_type = _data_type(o.data_type)
    if declared_type == derived.data_type:
        r.take(f"{path}.data_type")
    else:
        r.take(f"{path}.data_type")
        r.add(
            NOT_CARRIED,
            f"{path}.data_type",
            ENSEMBLE_OUTPUT_DECLARED.format(
                value=f"TYPE_{declared_type}",
                what="data type",
                source=source,
                derived=f"TYPE_{derived.data_type}",
            ),
        )
    reshape = getattr(derived, "reshape", None)
    declared_reshape = tuple(o.reshape.shape) if o.HasField("reshape") else None
    r.take(f"{path}.dims")
    r.take(f"{path}.reshape")
    if tuple(o.dims) == tuple(derived.full_dims) and declared_reshape == reshape:
        return
    declared = f"dims {_ints(o.dims)}" + (
        "" if declared_reshape is None else f" reshape {list(declared_reshape)}"
    )
    wanted = f"dims {list(derived.full_dims)}" + ("" if reshape is None else f" reshape {list(reshape)}")
    r.add(
        NOT_CARRIED,
        f"{path}.dims",
        ENSEMBLE_OUTPUT_DECLARED.format(value=declared, what="shape", source=source, derived=wanted),
    )


# --------------------------------------------------------------------------- the repository


def pipeline_name(directory: str) -> str:
    """A directory's name made a DNS-1035 label (metadata.name): lowercase letters, digits and '-',
    starting with a letter, at most 63 characters."""
    text = re.sub(r"[^a-z0-9-]+", "-", directory.lower())
    text = re.sub(r"-{2,}", "-", text)
    text = re.sub(r"^[^a-z]+", "", text)[:63].rstrip("-")
    return text or "imported"


def _parse(directory: str, text: str) -> tuple[Any, Finding | None]:
    try:
        return parse_text(text), None
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        detail = re.sub(r"^\d+:\d+ : ", "", str(exc))
        lines = text.splitlines()
        here = lines[line - 1] if line and 0 < line <= len(lines) else ""
        if "${" in here:
            others = [n for n, text in enumerate(lines, 1) if PLACEHOLDER_VALUE.search(text) and n != line]
            more = TEMPLATE_MORE.format(lines=", ".join(map(str, others))) if others else ""
            detail = f"{detail.rstrip('.')}; {TEMPLATE_HINT}{more}"
        elif "has no field named" in detail:
            detail = f"{detail} {UNKNOWN_FIELD_HINT}"
        position = (line, column or 0) if line else None
        return None, Finding(ERROR, directory, "", detail, position)


def _model_order(parsed: Mapping[str, Any], ensembles: Sequence[str]) -> list[str]:
    """Models in the order the ensembles call them, then the others by name."""
    order: list[str] = []
    for e in ensembles:
        for step in parsed[e].ensemble_scheduling.step:
            name = str(step.model_name)
            if name in parsed and name not in ensembles and name not in order:
                order.append(name)
    return order + sorted(d for d in parsed if d not in ensembles and d not in order)


def import_repository(
    configs: Mapping[str, str],
    no_config: Mapping[str, bool],
    *,
    name: str,
    uri: str,
    source: str | None = None,
    unreadable: Collection[str] = (),
    version_files: Mapping[str, VersionFiles] | None = None,
    misplaced: Mapping[str, str] | None = None,
    python_files: Mapping[str, PythonFiles] | None = None,
) -> ImportResult:
    """The TritonPipeline of a model repository: `configs` maps each model directory's name to its
    config.pbtxt text; `no_config` each directory without one to whether it holds version directories.
    `name` becomes metadata.name, `uri` spec.modelRepository.uri; `source` names the repository in
    messages (default: `uri`); `unreadable` names the directories whose config.pbtxt could not be read
    (the caller reports why; ensembles calling them are not reported again); `version_files` maps a
    model directory to its first subdirectory and what that holds (entry name -> is a directory), for
    the backend of a config that names none (absent: it has no subdirectory); `misplaced` maps a
    directory without config.pbtxt to one found a level down (`1/config.pbtxt`); `python_files` maps a
    model directory to the Python files of the version Triton loads (for what a Python model's
    auto_complete_config sets). Every problem is a finding; the document is None when any is an ERROR."""
    findings: list[Finding] = []
    configs = dict(configs)
    for directory, versions in sorted(no_config.items()):
        found = (misplaced or {}).get(directory)
        if found:
            message = NO_CONFIG_MISPLACED.format(found=f"{directory}/{found}", dir=directory)
        elif not versions:
            message = NO_CONFIG_NO_VERSIONS
        else:
            carried = _without_config(directory, (version_files or {}).get(directory))
            if isinstance(carried, Finding):
                configs[directory] = ""  # Triton completes an empty config
                findings.append(carried)
                continue
            message = NO_CONFIG_VERSIONS.format(why=carried)
        findings.append(Finding(NOT_CARRIED, directory, "", message))
    if not configs:
        if unreadable:
            return ImportResult(None, tuple(findings))
        findings.append(Finding(ERROR, "", "", NO_CONFIGS.format(dir=source or uri)))
        return ImportResult(None, tuple(findings))
    parsed: dict[str, Any] = {}
    unreadable = set(unreadable)
    early: dict[str, list[Finding]] = {}
    for directory in sorted(configs):
        cfg, problem = _parse(directory, configs[directory])
        if problem is not None:
            findings.append(problem)
            unreadable.add(directory)
            continue
        if not cfg.name:
            cfg.name = directory  # NORMALISATIONS: Triton names it after its directory
        elif cfg.name != directory:
            early[directory] = [
                Finding(ERROR, directory, "name", NAME_MISMATCH.format(name=str(cfg.name), dir=directory))
            ]
            cfg.name = directory
        parsed[directory] = cfg
    ensembles = sorted(d for d, c in parsed.items() if c.platform == ENSEMBLE_PLATFORM)
    order = _model_order(parsed, ensembles)
    models = {d: parsed[d] for d in order}
    origins: dict[str, tuple[str, str]] = {}
    model_docs, pipeline_docs = [], []
    stepped = {str(s.model_name) for e in ensembles for s in parsed[e].ensemble_scheduling.step}
    for i, directory in enumerate(order):
        r = _Reading(directory)
        files, python = (version_files or {}).get(directory), (python_files or {}).get(directory)
        model_docs.append(_model(parsed[directory], r, files, python, run_by_step=directory in stepped))
        _report_rest(parsed[directory], r)
        findings += early.get(directory, []) + r.findings
        origins.update(_origins(f"spec.models[{i}]", r))
    for j, directory in enumerate(ensembles):
        r = _Reading(directory)
        nested = {e: parsed[e] for e in ensembles}
        pipeline_docs.append(_pipeline(parsed[directory], r, models, nested, unreadable))
        _report_rest(parsed[directory], r)
        findings += early.get(directory, []) + r.findings
        origins.update(_origins(f"spec.pipelines[{j}]", r))
    spec: dict[str, Any] = {}
    gpus = max(
        (g + 1 for m in model_docs for inst in m.get("instances", []) for g in inst.get("gpus", [])),
        default=0,
    )
    if gpus > 1:
        spec["server"] = {"gpus": gpus}
    spec["modelRepository"] = {"uri": uri}
    spec["models"] = model_docs
    spec["pipelines"] = pipeline_docs
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
    if any(f.kind == ERROR for f in findings):
        return ImportResult(None, tuple(findings))
    try:
        tp = parse_pipeline(doc)
    except SpecError as exc:
        findings += [_located(ERROR, p, origins, SPEC_PROBLEM) for p in exc.problems]
        return ImportResult(None, tuple(findings))
    try:
        compile_pipeline(tp)
    except SpecError as exc:
        findings += [_located(WARNING, p, origins, COMPILE_PROBLEM) for p in exc.problems]
    return ImportResult(doc, tuple(findings))


def _origins(prefix: str, r: _Reading) -> dict[str, tuple[str, str]]:
    out = {prefix: (r.model, "")}
    out.update({f"{prefix}.{spec}": (r.model, triton) for spec, triton in r.origin.items()})
    return out


def _located(kind: str, problem: Problem, origins: Mapping[str, tuple[str, str]], template: str) -> Finding:
    """A spec or compiler problem at the model and Triton field it came from."""
    path = problem.path
    first = origins.get(f"{path}[0]")
    if path not in origins and first is not None and first[1].endswith("[0]"):
        model, item = first  # a problem of the list itself (too many items): at the Triton list field
        return Finding(kind, model, item.removesuffix("[0]"), template.format(message=problem.message))
    while path and path not in origins:
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    message = template.format(message=problem.message)
    if not path:
        return Finding(kind, "", problem.path, message)
    model, triton = origins[path]
    if path != problem.path:
        message = SPEC_PATH.format(message=message, path=problem.path)
    return Finding(kind, model, triton, message)


# --------------------------------------------------------------------------- YAML

FLOW_WIDTH = 100  # a mapping of scalars up to this wide is written on one line (below the top levels)
FLOW_DEPTH = 3  # mappings nested at least this deep may be written on one line (tensors, step inputs)


class _FlowMap(dict[str, Any]):
    """A mapping written on one line."""


class _Dumper(PlainDumper):
    """The project's plain YAML, with short mappings and lists on one line (_FlowMap, flat lists)."""


def _flat(value: Any) -> bool:
    return not isinstance(value, (dict, list)) or (
        isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value)
    )


def _styled(value: Any, depth: int = 0) -> Any:
    """`value` with its short mappings of scalars below FLOW_DEPTH made _FlowMaps (as the examples write
    tensors and step inputs); lists of scalars are always written on one line."""
    if isinstance(value, dict):
        out = {k: _styled(v, depth + 1) for k, v in value.items()}
        short = all(_flat(v) for v in value.values()) and len(json.dumps(value)) <= FLOW_WIDTH
        return _FlowMap(out) if depth >= FLOW_DEPTH and short else out
    if isinstance(value, list):
        return [_styled(v, depth + 1) for v in value]
    return value


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    flow = isinstance(data, _FlowMap) or not data
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    """Text of several lines (extraConfig) as a literal block, as written in a config.pbtxt."""
    style = "|" if "\n" in data else str_style(data)
    return dumper.represent_scalar(STR_TAG, data, style=style)


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=_flat(data))


_Dumper.add_representer(dict, _represent_dict)
_Dumper.add_representer(_FlowMap, _represent_dict)
_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(str, _represent_str)


def document_yaml(result: ImportResult, source: str) -> str:
    """The imported document as YAML, with a comment header: where it came from, what was not carried."""
    assert result.document is not None
    spec = result.document["spec"]
    left_out = result.of_kind(NOT_CARRIED)
    head = [
        f"# Imported by `tritonpipeline import` from {source}: {len(spec['models'])} model(s), "
        f"{len(spec['pipelines'])} ensemble(s).",
    ]
    head += [f"# Completed: {' '.join(str(f).split())}" for f in result.of_kind(COMPLETED)]
    if left_out:
        head.append(f"# {len(left_out)} setting(s) not carried (also printed on stderr by the import):")
        head += [f"#   {' '.join(str(f).split())}" for f in left_out]
    else:
        head.append("# Every setting of the configs is carried.")
    body = yaml.dump(_styled(result.document), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return "\n".join(head) + "\n" + body
