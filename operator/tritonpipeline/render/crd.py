"""The TritonPipeline CRD, generated from the typed spec so the two cannot drift apart: types, enums,
bounds, defaults, name patterns, list limits, descriptions and the spec's Rules (as CEL) all come from
the spec package (spec/); the status's typed and bounded schema from render/status_schema.py.

`tritonpipeline crd` prints it; `make generate` writes crds/ and the chart's copy, and a test checks
they are current.
"""

from __future__ import annotations

import copy
import functools
import json
import types
import typing
from importlib import resources
from typing import Any, Literal

import annotated_types as at
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from .. import yamltext
from ..settings import GROUP, KIND, PLURAL, VERSION
from ..spec import K8S_NAME_RE, RULE_TEXT, PipelineSpec, Rule
from ..spec.kubernetes import KubernetesType
from .checks import DNS_1035_LABEL
from .routing_objects import HEADLESS_SUFFIX
from .status_schema import status_schema

# Every list of the spec is atomic (no x-kubernetes-list-type map): our rules refuse duplicate names with
# the field path (compiler/rules/, at admission and in every reconcile), and a list-map made the
# apiserver check keys and track field ownership item by item before any validation, refused or not. A
# 2.8 MB spec.models of small entries (a tenant's dry run, refused for its size) cost it 4.7 CPU s with
# list-maps and 2.0 s without; a Deployment of that size costs 1.0 s (bench/results/apiserver-cost.json).
# Server-side apply then owns each list whole, as one author writes a pipeline.

# the schemas of the Kubernetes types pass-through fields hold (spec.kubernetes.KubernetesType), generated
# by `make generate` from the Kubernetes client's models (tools/kubernetes_types.py)
KUBERNETES_TYPES = "kubernetes_types.json"
PASSED_THROUGH = "Schema: Kubernetes' {name}."


def scalar(what: str) -> dict[str, Any]:
    """A string, a number or a boolean as written, nothing nested. A structural schema gives a node one
    type, and a rule cannot see a node without one, so the node keeps what is sent and admits no
    property and no item: the API server refuses a mapping or a list there (an empty one is no deeper)
    before anything stores or reads it. What it holds is the spec's to check (`what` says, for the CRD's
    readers), with the field's path."""
    return {
        "x-kubernetes-preserve-unknown-fields": True,
        "maxProperties": 0,
        "maxItems": 0,
        "description": f"{what}; not a mapping or a list",
    }


# apimachinery's resource.Quantity as a pod spec takes it: a string (`500m`, `2Gi`) or a number (`0.5`)
QUANTITY = scalar("A quantity such as 500m, 0.5, 2 or 1.5Gi")
# a model's `parameters` values (Triton's string_value, from a string, a number or a boolean)
PARAMETER = scalar("A string, a number or a boolean")
# a condition's value, an output's default (spec/pipelines.py's Scalar)
SCALAR = scalar("A string, a number or a boolean")


@functools.cache
def _kubernetes_types() -> dict[str, Any]:
    text = resources.files(__package__).joinpath(KUBERNETES_TYPES).read_text()
    # {"kubernetesClient": the client version they were generated from, "types": {name: schema}}
    return dict(json.loads(text)["types"])


def kubernetes_type(name: str) -> dict[str, Any]:
    """The schema of Kubernetes' type `name` (a copy: the caller adds its description)."""
    found = _kubernetes_types().get(name)
    if found is None:
        raise ValueError(f"no schema of Kubernetes' {name} in render/{KUBERNETES_TYPES}: run `make generate`")
    return copy.deepcopy(found)


def passes_through(schema: dict[str, Any]) -> bool:
    """Whether a node of the CRD's schema is a Kubernetes type's (its fields are Kubernetes' own)."""
    return PASSED_THROUGH.split("{", 1)[0] in schema.get("description", "")


def kubernetes_type_names(model: type[BaseModel] = PipelineSpec) -> list[str]:
    """The Kubernetes types the spec's pass-through fields name, each once, sorted."""
    found: set[str] = set()

    def visit(tp: Any) -> None:
        if isinstance(tp, KubernetesType):
            found.add(tp.name)
        elif isinstance(tp, FieldInfo):
            for m in tp.metadata:
                visit(m)
            visit(tp.annotation)
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp not in seen:
                seen.add(tp)
                for field in tp.model_fields.values():
                    visit(field)
        else:
            for arg in typing.get_args(tp):
                visit(arg)

    seen: set[type] = set()
    visit(model)
    return sorted(found)


def _constraints(schema: dict[str, Any], metadata: list[Any]) -> None:
    for m in metadata:
        if isinstance(m, at.Ge):
            schema["minimum"] = m.ge
        elif isinstance(m, at.Gt):
            schema["minimum"] = m.gt
            schema["exclusiveMinimum"] = True
        elif isinstance(m, at.Le):
            schema["maximum"] = m.le
        elif isinstance(m, at.MinLen):
            schema["minItems" if schema.get("type") == "array" else "minLength"] = m.min_length
        elif isinstance(m, at.MaxLen):
            schema["maxItems" if schema.get("type") == "array" else "maxLength"] = m.max_length
        elif isinstance(m, AfterValidator) and (pattern := getattr(m.func, "pattern", None)):
            schema["pattern"] = pattern
            if most := getattr(m.func, "max_length", None):
                schema["maxLength"] = most
        elif isinstance(m, AfterValidator) and isinstance(rule := getattr(m.func, "rule", None), Rule):
            schema.setdefault("x-kubernetes-validations", []).append(rule.cel_rule())


def _schema(tp: Any, metadata: list[Any] | None = None) -> dict[str, Any]:
    metadata = list(metadata or [])
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(tp)
        for e in extra:
            if isinstance(e, FieldInfo):
                metadata += e.metadata
            else:
                metadata.append(e)
        return _schema(base, metadata)
    if passed := [m for m in metadata if isinstance(m, KubernetesType)]:
        return {**kubernetes_type(passed[0].name), "description": PASSED_THROUGH.format(name=passed[0].name)}
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _schema(args[0], metadata)
        if set(args) == {str, int}:
            return {"x-kubernetes-int-or-string": True}
        if set(args) == {int, float}:
            number: dict[str, Any] = {"type": "number"}
            _constraints(number, metadata)
            return number
        if set(args) == {bool, int, float, str}:  # spec.pipelines' Scalar: checked by the compiler
            return copy.deepcopy(SCALAR)
        raise TypeError(f"no CRD schema for {tp}: a structural schema gives a node one type")
    if origin is Literal:
        schema: dict[str, Any] = {"type": "string", "enum": list(typing.get_args(tp))}
    elif origin is list:
        (item,) = typing.get_args(tp)
        schema = {"type": "array", "items": _schema(item)}
    elif origin is dict:
        _, value = typing.get_args(tp)
        if value is str:
            schema = {"type": "object", "additionalProperties": {"type": "string"}}
        elif value is Any:  # a mapping of scalars (spec/models.py's parameters): no nesting
            schema = {"type": "object", "additionalProperties": copy.deepcopy(PARAMETER)}
        else:
            raise TypeError(f"no CRD schema for {tp}: type the values, or name a KubernetesType")
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        schema = _object(tp)
    elif tp is bool:
        schema = {"type": "boolean"}
    elif tp is int:
        schema = {"type": "integer"}
    elif tp is float:
        schema = {"type": "number"}
    elif tp is str:
        schema = {"type": "string"}
    else:
        raise TypeError(f"no CRD schema for {tp}: every field has a bounded type")
    _constraints(schema, metadata)
    return schema


def _object(model: type[BaseModel]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        s = _schema(field.annotation, field.metadata)
        if field.is_required():
            required.append(alias)
        elif isinstance(field.default, (str, int, float, bool)) and field.default is not None:
            s["default"] = field.default
        if field.description:
            s["description"] = " ".join(filter(None, [field.description, s.get("description")]))
        props[alias] = s
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if model.__doc__ and model.__module__.endswith("spec"):
        schema["description"] = " ".join(model.__doc__.split())
    rules = getattr(model, "RULES", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.cel_rule() for rule in rules]
    return schema


def _headless_rule() -> dict[str, str]:
    """render/checks.py's limit on the headless Service name (Header routing), at admission."""
    most = DNS_1035_LABEL.most - len(HEADLESS_SUFFIX)
    return {
        "rule": "!has(self.spec.routing) || !has(self.spec.routing.sessionAffinity) || "
        f"self.spec.routing.sessionAffinity != 'Header' || size(self.metadata.name) <= {most}",
        "message": f"with routing.sessionAffinity Header the Service NAME{HEADLESS_SUFFIX} is created: "
        f"metadata.name has at most {most} characters",
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition for TritonPipeline."""
    spec_schema = _schema(PipelineSpec)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["tp"],
                "categories": ["triton", "ml"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            "name": "Ready",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                        },
                        {"name": "Replicas", "type": "integer", "jsonPath": ".status.readyReplicas"},
                        {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint"},
                        {
                            "name": "Bottleneck",
                            "type": "string",
                            "jsonPath": ".status.bottleneck",
                            "description": "pipeline/step with the most queue + compute time per request",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A declared Triton model DAG, compiled into ensembles, "
                            "routers and the Kubernetes objects that serve them.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema(),
                            },
                            "x-kubernetes-validations": [
                                {
                                    "rule": f"self.metadata.name.matches('{K8S_NAME_RE.pattern}')",
                                    "message": f"metadata.name must be {RULE_TEXT['metadata.name']}",
                                },
                                _headless_rule(),
                            ],
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated from operator/tritonpipeline/spec/ by `make generate`; do not edit.\n"
    return header + yamltext.dump(crd(), width=110)
