"""Typed TritonPipeline spec: YAML -> validated, immutable objects with field-path errors.

Structural rules live here (types, enums, bounds, names, unknown fields, duplicate YAML keys).
Cross-references between fields (steps, tensors, shapes) are checked by the compiler.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

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

API_VERSION = "serving.tritonpipeline.io/v1alpha1"
KIND = "TritonPipeline"
DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:26.08-py3"  # README "Security": why this release

# Every pattern is applied with fullmatch (a `$` alone lets a trailing newline through in Python) and is
# written in the syntax Python's re and Go's RE2 share: the CRD carries the same strings.
MAX_TENSOR_NAME = 256
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# tensor names come from exported models (input.1, onnx::Gemm_0, /model/embed/input, 1234, input:0) and
# Triton takes any text; only control characters (C0, DEL, C1: Unicode category Cc) are refused
TENSOR_RE = re.compile(r"^[^\x00-\x1f\x7f-\x9f]{1,256}$")
IO_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_:-]{0,63}$")
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


class FieldProblems(ValueError):
    """Problems a validator found below its own field: (sub-path such as `[2]` or `.gpus[0]`, message).
    Reported at the full field path instead of the validator's."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.items = items
        super().__init__("; ".join(message for _, message in items))


def _name_rule(pattern: re.Pattern[str], what: str) -> Any:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"invalid {what} {quote(value)}: {_RULE_TEXT[what]}")
        return value

    check.pattern = pattern.pattern  # type: ignore[attr-defined]  # read by the CRD generator
    return AfterValidator(check)


_RULE_TEXT = {
    "name": "use letters, digits, '_' or '-', start with a letter or '_', at most 64 characters",
    "tensor name": f"any text of 1 to {MAX_TENSOR_NAME} characters without control characters "
    "(such as input.1, onnx::Gemm_0 or /model/embed/input)",
    "pipeline tensor name": "use letters, digits, '_', ':' or '-' (no '.'), start with a letter or '_', "
    "at most 64 characters",
    "backend": "lowercase letters, digits and '_', such as python or onnxruntime",
    "header": "an HTTP header name: letters, digits and '-'",
    "resource name": "a Kubernetes extended resource name with its domain, such as nvidia.com/gpu",
    "object name": "a Kubernetes object name: lowercase letters, digits, '-' and '.'",
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

Name = Annotated[str, _name_rule(NAME_RE, "name")]
TensorName = Annotated[str, _name_rule(TENSOR_RE, "tensor name")]
IOName = Annotated[str, _name_rule(IO_RE, "pipeline tensor name")]
Dim = Annotated[int, Field(ge=-1), AfterValidator(lambda d: _check_dim(d))]
Dims = Annotated[list[Dim], Field(min_length=1, max_length=8)]


def _check_dim(d: int) -> int:
    if d == 0:
        raise ValueError("a dimension is -1 (any size) or a positive size, not 0")
    return d


class _Base(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=False,
        validate_by_alias=True,
    )


class InputTensor(_Base):
    name: TensorName
    data_type: DataType
    dims: Dims
    optional: bool = False


class OutputTensor(_Base):
    name: TensorName
    data_type: DataType
    dims: Dims


class Instance(_Base):
    kind: Literal["GPU", "CPU", "AUTO", "MODEL"] = "AUTO"
    count: Annotated[int, Field(ge=1, le=64)] = 1
    gpus: list[Annotated[int, Field(ge=0)]] = []


class DynamicBatching(_Base):
    preferred_batch_sizes: list[Annotated[int, Field(ge=1)]] = []
    max_queue_delay_microseconds: Annotated[int, Field(ge=0)] = 0
    preserve_ordering: bool = False


class Controls(_Base):
    start: TensorName | None = None
    end: TensorName | None = None
    ready: TensorName | None = None
    correlation_id: TensorName | None = None

    def names(self) -> list[str]:
        return [n for n in (self.start, self.end, self.ready, self.correlation_id) if n]

    @model_validator(mode="after")
    def _distinct(self) -> Controls:
        names = self.names()
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"control tensor names must differ; {', '.join(dup)} is used twice")
        return self


class State(_Base):
    input_name: TensorName
    output_name: TensorName
    data_type: DataType
    dims: Dims


class SequenceBatching(_Base):
    strategy: Literal["direct", "oldest"] = "direct"
    max_sequence_idle_microseconds: Annotated[int, Field(ge=1)] = 1_000_000
    controls: Controls = Controls()
    states: list[State] = []
    max_candidate_sequences: Annotated[int, Field(ge=1)] | None = None
    preferred_batch_sizes: list[Annotated[int, Field(ge=1)]] = []
    max_queue_delay_microseconds: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _oldest_only(self) -> SequenceBatching:
        if self.strategy == "direct":
            extra = [
                alias
                for alias, value in (
                    ("maxCandidateSequences", self.max_candidate_sequences),
                    ("preferredBatchSizes", self.preferred_batch_sizes or None),
                    ("maxQueueDelayMicroseconds", self.max_queue_delay_microseconds),
                )
                if value is not None
            ]
            if extra:
                raise ValueError(f"{', '.join(extra)} only apply to strategy 'oldest'")
        return self


class Model(_Base):
    name: Name
    backend: Annotated[str, _name_rule(BACKEND_RE, "backend")] | None = None
    platform: (
        Literal[
            "tensorrt_plan",
            "onnxruntime_onnx",
            "pytorch_libtorch",
            "tensorflow_savedmodel",
            "tensorflow_graphdef",
        ]
        | None
    ) = None
    max_batch_size: Annotated[int, Field(ge=0, le=1 << 20)] = 0
    inputs: Annotated[list[InputTensor], Field(min_length=1)]
    outputs: Annotated[list[OutputTensor], Field(min_length=1)]
    instances: list[Instance] = []
    dynamic_batching: DynamicBatching | None = None
    sequence_batching: SequenceBatching | None = None
    decoupled: bool = False
    parameters: dict[str, Any] = {}

    @field_validator("parameters")
    @classmethod
    def _scalar_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            if not isinstance(item, (str, int, float, bool)):
                raise ValueError(f"parameter {key!r} must be a string, number or boolean")
        return value

    @model_validator(mode="after")
    def _one_of_backend_platform(self) -> Model:
        if (self.backend is None) == (self.platform is None):
            raise ValueError(
                "set exactly one of backend (such as python) or platform (such as tensorrt_plan)"
            )
        if self.dynamic_batching is not None and self.sequence_batching is not None:
            raise ValueError("dynamicBatching and sequenceBatching cannot both be set")
        return self


class StepSpec(_Base):
    name: Name | None = None
    model: Name
    inputs: dict[str, str] = {}

    @property
    def step_name(self) -> str:
        return self.name or self.model


class PipelineInput(_Base):
    name: IOName
    data_type: DataType
    dims: Dims


class PipelineOutput(_Base):
    name: IOName
    source: str = Field(alias="from")


class Pipeline(_Base):
    name: Name
    inputs: Annotated[list[PipelineInput], Field(min_length=1)]
    steps: Annotated[list[StepSpec], Field(min_length=1)]
    outputs: Annotated[list[PipelineOutput], Field(min_length=1)]
    fan_out: Literal["router", "shared"] = "router"
    max_batch_size: Annotated[int, Field(ge=0)] | None = None


class SecretRef(_Base):
    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")]


class AdminKeyRef(_Base):
    """A Secret (in the pipeline's namespace) holding the key of Triton's administrative APIs."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")]
    key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = "admin-key"


class KeyRef(_Base):
    """One key of a Secret or ConfigMap in the pipeline's namespace."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")]
    key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = "ca.crt"


class S3Options(_Base):
    """How the init container reaches an S3 or S3-compatible store (MinIO, Ceph RGW, ...)."""

    endpoint: Annotated[str, _name_rule(URL_RE, "url")] | None = None
    region: Annotated[str, _name_rule(REGION_RE, "region")] | None = None
    # None: path-style with a custom endpoint (S3-compatible stores), else boto3's automatic choice
    addressing_style: Literal["auto", "path", "virtual"] | None = None
    # the PEM CA bundle that signed the endpoint's certificate (a private CA), from a Secret or a ConfigMap
    ca_secret_ref: KeyRef | None = None
    ca_config_map_ref: KeyRef | None = None

    @model_validator(mode="after")
    def _one_ca(self) -> S3Options:
        found = []
        if self.ca_secret_ref is not None and self.ca_config_map_ref is not None:
            found.append(
                (".caConfigMapRef", "give the CA bundle once: caSecretRef or caConfigMapRef, not both")
            )
        has_ca = self.ca_secret_ref is not None or self.ca_config_map_ref is not None
        if has_ca and self.endpoint is not None and self.endpoint.startswith("http://"):
            found.append((".endpoint", f"a CA bundle needs an https:// endpoint, got {quote(self.endpoint)}"))
        if found:
            raise FieldProblems(found)
        return self


class GcsOptions(_Base):
    """gs:// credentials: the key of modelRepository.secretRef holding a service-account JSON key, mounted
    as a file for GOOGLE_APPLICATION_CREDENTIALS. Without secretRef the pod's identity is used
    (Workload Identity through spec.server.serviceAccountName)."""

    credentials_key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = "key.json"


class ModelRepository(_Base):
    uri: Annotated[str, Field(min_length=1, max_length=1024)]
    # s3://: a Secret whose keys become the init container's environment (AWS_ACCESS_KEY_ID,
    # AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); gs://: a Secret holding a service-account key file
    secret_ref: SecretRef | None = None
    s3: S3Options | None = None
    gcs: GcsOptions | None = None

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
                raise ValueError(f"invalid claim name {head!r} in {uri!r}: {_RULE_TEXT['object name']}")
        if any(c in uri for c in "\n\r\0"):
            raise ValueError("the uri contains control characters")
        return uri

    @model_validator(mode="after")
    def _options_of_the_scheme(self) -> ModelRepository:
        found = [
            (f".{name}", f"applies to {scheme}:// sources only, and the uri is {quote(self.uri)}")
            for name, scheme in (("s3", "s3"), ("gcs", "gs"))
            if getattr(self, name) is not None and self.scheme != scheme
        ]
        if found:
            raise FieldProblems(found)
        return self

    @property
    def scheme(self) -> str:
        return self.uri.partition("://")[0] if "://" in self.uri else "local"


class Server(_Base):
    image: Annotated[str, Field(min_length=1)] = DEFAULT_IMAGE
    replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    gpus: Annotated[int, Field(ge=0, le=64)] = 1
    gpu_resource: Annotated[str, _name_rule(RESOURCE_RE, "resource name")] = "nvidia.com/gpu"
    resources: dict[str, Any] = {}
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    affinity: dict[str, Any] = {}
    args: list[str] = []
    # None: the operator's restricted-compliant defaults (kube/manifests.py); a mapping replaces them
    security_context: dict[str, Any] | None = None
    pod_security_context: dict[str, Any] | None = None
    service_account_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = None
    image_pull_secrets: list[SecretRef] = []
    init_resources: dict[str, Any] = {}
    startup_timeout_seconds: Annotated[int, Field(ge=10, le=86400)] = 600
    # the Deployment's strategy, passed through; None: the operator's default (kube/manifests.py)
    strategy: dict[str, Any] | None = None
    admin_key_secret_ref: AdminKeyRef | None = None

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
            (f".{key}", f"invalid {what} {text!r}: {_RULE_TEXT[what]}")
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


class GatewayRef(_Base):
    """The Gateway that the HTTPRoute and GRPCRoute attach to (provider gateway-api)."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")]
    namespace: Annotated[str, _name_rule(DNS_LABEL_RE, "namespace")] | None = None
    section_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = None


class Routing(_Base):
    session_affinity: Literal["None", "ClientIP", "Header"] = "None"
    header: Annotated[str, _name_rule(HEADER_RE, "header")] = "x-triton-sequence-id"
    provider: Literal["ingress-nginx", "istio", "gateway-api"] = "ingress-nginx"
    host: Annotated[str, _name_rule(HOST_RE, "host")] | None = None
    ingress_class_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = None
    tls_secret_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = None
    gateway: GatewayRef | None = None

    @model_validator(mode="after")
    def _gateway_for_gateway_api(self) -> Routing:
        if self.session_affinity == "Header" and self.provider == "gateway-api" and self.gateway is None:
            raise ValueError(
                "provider gateway-api needs routing.gateway "
                "(the Gateway the HTTPRoute and GRPCRoute attach to)"
            )
        return self


class Autoscaling(_Base):
    min_replicas: Annotated[int, Field(ge=1, le=1000)] = 1
    max_replicas: Annotated[int, Field(ge=1, le=1000)]
    metric: Literal["queueTime", "pendingRequests", "gpuUtilization"] = "queueTime"
    target: Annotated[float, Field(gt=0)] = 50
    engine: Literal["hpa", "keda"] = "hpa"
    prometheus_address: Annotated[str, _name_rule(URL_RE, "url")] | None = None

    @field_validator("target", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class NetworkPolicy(_Base):
    """Who may reach the pipeline's pods: NetworkPolicy peers (podSelector, namespaceSelector, ipBlock).
    Unset: the pods of the pipeline's namespace; an empty list: nobody."""

    inference: list[dict[str, Any]] | None = None
    metrics: list[dict[str, Any]] | None = None


class PipelineSpec(_Base):
    server: Server = Server()
    model_repository: ModelRepository
    models: Annotated[list[Model], Field(min_length=1)]
    pipelines: Annotated[list[Pipeline], Field(min_length=1)]
    routing: Routing = Routing()
    autoscaling: Autoscaling | None = None
    network_policy: NetworkPolicy | None = None

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
