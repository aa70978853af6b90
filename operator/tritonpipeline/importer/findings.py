"""What an import tells: the kinds of finding, the finding itself, the result, and every message
the mapper writes (the command's own are in cli/cmd_import.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ERROR, NOT_CARRIED, WARNING = "error", "not carried", "warning"
COMPLETED = "completed"  # carried from what a model.py's auto_complete_config sets (a note, not a problem)


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
