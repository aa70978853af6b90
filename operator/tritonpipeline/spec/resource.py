"""The whole TritonPipeline custom resource: its metadata (Kubernetes' ObjectMeta, as the API server
checks it) and its spec, the sections of the other modules of spec/ together (server.gpus against the
instance groups' GPU indices is checked here)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from ..errors import quote
from ..settings import API_VERSION, KIND
from . import kubernetes
from .autoscaling import Autoscaling, NetworkPolicy
from .base import DNS_LABEL_RE, K8S_NAME_RE, MAX_MODELS, MAX_PIPELINES, FieldProblems, _Base, _name_rule
from .models import Instance, Model
from .pipelines import Pipeline
from .routing import Routing
from .server import ModelRepository, Server


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
        "pods (see docs/concepts/security.md).",
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


# ObjectMeta's fields (what `kubectl get -o yaml` shows included): any other is refused, as kubectl's
# strict field validation refuses it
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
})  # fmt: skip
UNKNOWN_META_FIELD = "unknown field {name} of metadata (Kubernetes' ObjectMeta); expected one of: {known}"


class Metadata(BaseModel):
    """Kubernetes ObjectMeta: name and namespace matter, labels and annotations are checked as the
    apiserver checks them; the apiserver's other fields are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: Annotated[str, _name_rule(K8S_NAME_RE, "metadata.name")]
    namespace: Annotated[str, _name_rule(DNS_LABEL_RE, "namespace")] | None = None
    generation: int | None = None
    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = [k for k in value if k not in OBJECT_META_FIELDS]
            if unknown:
                known = ", ".join(sorted(OBJECT_META_FIELDS))
                raise FieldProblems(
                    [(f".{k}", UNKNOWN_META_FIELD.format(name=quote(k), known=known)) for k in unknown]
                )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return value if value is None else kubernetes.passed_through(value, kubernetes.labels)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return value if value is None else kubernetes.passed_through(value, kubernetes.annotation_map)


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
