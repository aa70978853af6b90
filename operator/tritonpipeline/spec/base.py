"""The spec's building blocks: name patterns, limits, the Rule type (one rule: Python and CEL), the
shared model base and the tensor-name and dimension types every section uses."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ..errors import quote

DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:26.08-py3"  # docs/concepts/security.md: why this release
# the NVIDIA device plugin's resource, and the key of the taint GPU nodes usually carry
NVIDIA_GPU = "nvidia.com/gpu"

# Every pattern is applied with fullmatch (a `$` alone lets a trailing newline through in Python) and is
# written in the syntax Python's re and Go's RE2 share: the CRD carries the same strings.
MAX_TENSOR_NAME = 256
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# a model's name is its directory's, and Triton takes dots there (llava-1.5, llama-3.1-8b); a step's name
# may not hold one (a reference is STEP.TENSOR), so a step running such a model is named explicitly
MODEL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
# tensor names come from exported models (input.1, onnx::Gemm_0, /model/embed/input, 1234, input:0) and
# Triton takes any text; only control characters (C0, DEL, C1: Unicode category Cc) are refused
TENSOR_RE = re.compile(r"^[^\x00-\x1f\x7f-\x9f]{1,256}$")
PROFILE_RE = re.compile(r"^[0-9]{1,9}$")  # a TensorRT optimization profile's index (9 digits fit an int)
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
# the backend Triton runs each platform on (core's NormalizeModelConfig fills it in)
PLATFORM_BACKEND: dict[str, str] = {
    "tensorrt_plan": "tensorrt",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
}
# backends whose config completion makes every model decoupled, with what does it: Triton loads such a model
# decoupled when its config leaves the transaction policy out, and refuses it when the config says false
DECOUPLED_BACKENDS: dict[str, str] = {
    "vllm": "its auto_complete_config sets model_transaction_policy.decoupled: true, and its initialize "
    "asserts it",
}
AutoscalingMetric = Literal["queueTime", "pendingRequests", "gpuUtilization"]
# what scales a pipeline: `auto` is resolved by the operator from API discovery
# (render/autoscaling_objects.py)
AutoscalingEngine = Literal["auto", "hpa", "keda"]


class FieldProblems(ValueError):
    """Problems a validator found below its own field: (sub-path such as `[2]` or `.gpus[0]`, message).
    Reported at the full field path instead of the validator's."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.items = items
        super().__init__("; ".join(message for _, message in items))


@dataclass(frozen=True)
class Rule:
    """One rule, one home: `holds` for the spec's validators and the same rule in CEL (over `self`) for
    the CRD's x-kubernetes-validations (render/crd.py), with one message; so `validate`, the operator and
    the apiserver's admission agree (tests/component/test_crd.py runs a table of values through both).

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
    "model name": "use letters, digits, '_', '-' or '.', start with a letter or '_', at most 64 characters",
    "tensor name": f"any text of 1 to {MAX_TENSOR_NAME} characters without control characters "
    "(such as input.1, onnx::Gemm_0 or /model/embed/input)",
    "backend": "lowercase letters, digits and '_', such as python or onnxruntime",
    "header": "an HTTP header name: letters, digits and '-'",
    "resource name": "a Kubernetes extended resource name with its domain, such as nvidia.com/gpu",
    "object name": "a Kubernetes object name: lowercase letters, digits, '-' and '.'",
    "quantity": "a Kubernetes quantity such as 512Mi, 2Gi or 1.5G",
    "profile": "a TensorRT optimization profile's index, such as 0 (at most 9 digits)",
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
ProfileIndex = Annotated[str, _name_rule(PROFILE_RE, "profile", most=9)]
Name = Annotated[str, _name_rule(NAME_RE, "name")]
ModelName = Annotated[str, _name_rule(MODEL_NAME_RE, "model name")]
TensorName = Annotated[str, _name_rule(TENSOR_RE, "tensor name", most=MAX_TENSOR_NAME)]
# The largest integers Triton's model configuration holds: protobuf int32 and uint32, and for its 64-bit
# fields the largest integer the CRD can state exactly (the apiserver keeps a schema's bound as a float64,
# exact to 2^53). That also keeps a microsecond field far below where Triton's conversion to 64-bit
# nanoseconds (x 1000) wraps around: a queue delay, a timeout or an idle time that fires at once or never.
INT32_MAX = (1 << 31) - 1
UINT32_MAX = (1 << 32) - 1
MAX_INTEGER = (1 << 53) - 1
MAX_BATCH_SIZE = 1 << 20
NONZERO_DIM = Rule(lambda d: d != 0, "self != 0", "a dimension is -1 (any size) or a positive size, not 0")
Dim = Annotated[int, Field(ge=-1, le=MAX_INTEGER), NONZERO_DIM.validator()]
FixedDim = Annotated[int, Field(ge=1, le=MAX_INTEGER)]
# the longest lists: bounds the apiserver's cost of the CEL rules over them, and the objects' size
MAX_MODELS, MAX_PIPELINES, MAX_STEPS, MAX_TENSORS, MAX_INSTANCE_GROUPS, MAX_STATES = 256, 64, 128, 64, 16, 16
MAX_DIMS = 8
MAX_EXTRA_CONFIG = 64 * 1024  # characters of a model's extraConfig (the whole CR is at most 1.5 MiB)
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
