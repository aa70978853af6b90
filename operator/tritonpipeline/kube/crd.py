"""The TritonPipeline CRD, generated from the typed spec so the two cannot drift apart.

`tritonpipeline crd` prints it; crds/ holds the committed copy and a test checks they are equal.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

import annotated_types as at
import yaml
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from ..settings import GROUP, KIND, PLURAL, VERSION
from ..spec import K8S_NAME_RE, PipelineSpec
from .checks import DNS_1035_LABEL
from .routing import HEADLESS_SUFFIX

# lists whose items are keyed by a required `name`: the apiserver then refuses duplicate names itself
# (and server-side apply merges them by name)
MAP_LISTS = {
    ("PipelineSpec", "models"),
    ("PipelineSpec", "pipelines"),
    ("Model", "inputs"),
    ("Model", "outputs"),
    ("Pipeline", "inputs"),
    ("Pipeline", "outputs"),
}
LIST_LIMITS = {"models": 256, "pipelines": 64, "steps": 128, "inputs": 64, "outputs": 64, "instances": 16}

# Checks that need no graph, enforced at admission (CEL). The compiler repeats them with field paths.
CEL_RULES: dict[str, list[dict[str, str]]] = {
    "Autoscaling": [
        {
            "rule": "self.minReplicas <= self.maxReplicas",
            "message": "minReplicas must be <= maxReplicas",
            "fieldPath": ".minReplicas",
        },
    ],
    "Routing": [
        {
            "rule": "self.sessionAffinity != 'Header' || size(self.header) > 0",
            "message": "sessionAffinity Header needs a header name",
            "fieldPath": ".header",
        },
        {
            "rule": "self.sessionAffinity != 'Header' || self.provider != 'gateway-api' || has(self.gateway)",
            "message": "provider gateway-api needs routing.gateway (the Gateway the HTTPRoute and GRPCRoute "
            "attach to)",
            "fieldPath": ".gateway",
        },
    ],
    "Model": [
        {
            "rule": "has(self.backend) != has(self.platform)",
            "message": "set exactly one of backend (such as python) or platform (such as tensorrt_plan)",
        },
        {
            "rule": "!(has(self.dynamicBatching) && has(self.sequenceBatching))",
            "message": "dynamicBatching and sequenceBatching cannot both be set",
        },
    ],
    "SequenceBatching": [
        {
            "rule": "self.strategy == 'oldest' || (!has(self.maxCandidateSequences) && "
            "!has(self.maxQueueDelayMicroseconds) && (!has(self.preferredBatchSizes) || "
            "size(self.preferredBatchSizes) == 0))",
            "message": "maxCandidateSequences, preferredBatchSizes and maxQueueDelayMicroseconds only apply "
            "to strategy 'oldest'",
        },
    ],
}


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
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _schema(args[0], metadata)
        return {"x-kubernetes-int-or-string": True} if {str, int} <= set(args) else {}
    if origin is Literal:
        schema: dict[str, Any] = {"type": "string", "enum": list(typing.get_args(tp))}
    elif origin is list:
        (item,) = typing.get_args(tp)
        schema = {"type": "array", "items": _schema(item)}
    elif origin is dict:
        _, value = typing.get_args(tp)
        if value is str:
            schema = {"type": "object", "additionalProperties": {"type": "string"}}
        else:
            schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
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
        schema = {"x-kubernetes-preserve-unknown-fields": True}
    _constraints(schema, metadata)
    return schema


def _object(model: type[BaseModel]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        s = _schema(field.annotation, field.metadata)
        if alias in LIST_LIMITS and s.get("type") == "array":
            s.setdefault("maxItems", LIST_LIMITS[alias])
        if (model.__name__, alias) in MAP_LISTS:
            s["x-kubernetes-list-type"] = "map"
            s["x-kubernetes-list-map-keys"] = ["name"]
        if field.is_required():
            required.append(alias)
        elif isinstance(field.default, (str, int, float, bool)) and field.default is not None:
            s["default"] = field.default
        if field.description:
            s["description"] = field.description
        props[alias] = s
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if model.__doc__ and model.__module__.endswith("spec"):
        schema["description"] = " ".join(model.__doc__.split())
    if model.__name__ in CEL_RULES:
        schema["x-kubernetes-validations"] = CEL_RULES[model.__name__]
    return schema


def _headless_rule() -> dict[str, str]:
    """kube/checks.py's limit on the headless Service name (Header routing), at admission."""
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
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                            "x-kubernetes-validations": [
                                {
                                    "rule": f"self.metadata.name.matches('{K8S_NAME_RE.pattern}')",
                                    "message": "metadata.name must be a DNS-1035 label (lowercase letters, "
                                    "digits and '-', starting with a letter, at most 63 characters)",
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
    header = "# Generated from operator/tritonpipeline/spec.py by `tritonpipeline crd`; do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=110)
