"""The structural schemas of the Kubernetes types the spec passes through (tools/generate.py writes them to
operator/tritonpipeline/render/kubernetes_types.json; render/crd.py puts each where a spec field names its
type with spec.kubernetes.KubernetesType). Read off the Kubernetes Python client's models (the
`openapi_types` and `attribute_map` its generator wrote from the API's OpenAPI document), so the CRD takes
what the API server takes for that type and prunes nothing a pod spec would keep; a pinned client
version pins the schemas. Pure: no cluster is asked."""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client

# the client's spelling of IntOrString (its only use of `object` in these types: schemas() refuses any other)
INT_OR_STRING = {("RollingUpdateDeployment", "maxSurge"), ("RollingUpdateDeployment", "maxUnavailable")}
# apimachinery's resource.Quantity, which the client spells `str`: a number or a string (see render/crd.py)
QUANTITY_MAPS = {("ResourceRequirements", "limits"), ("ResourceRequirements", "requests")}
SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "datetime": "string"}
CLIENT_PREFIX = re.compile(r"^(?:V1|V2|CoreV1)")
LIST = re.compile(r"^List\[(.+)\]$")
DICT = re.compile(r"^Dict\[str, (.+)\]$")


def _model(name: str) -> Any:
    for prefix in ("V1", "CoreV1", "V2"):
        found = getattr(kubernetes.client, prefix + name, None)
        if found is not None:
            return found
    raise ValueError(f"the Kubernetes client has no model {name!r}")


def _type(spelled: str, owner: str, field: str, quantity: dict[str, Any]) -> dict[str, Any]:
    if m := LIST.match(spelled):
        return {"type": "array", "items": _type(m[1], owner, field, quantity)}
    if m := DICT.match(spelled):
        value = quantity if (owner, field) in QUANTITY_MAPS else _type(m[1], owner, field, quantity)
        return {"type": "object", "additionalProperties": value}
    if spelled == "object":
        if (owner, field) not in INT_OR_STRING:
            raise ValueError(f"{owner}.{field}: an untyped field the schemas cannot bound")
        return {"x-kubernetes-int-or-string": True}
    if spelled in SCALARS:
        return {"type": SCALARS[spelled]}
    return schema(CLIENT_PREFIX.sub("", spelled), quantity)


def schema(name: str, quantity: dict[str, Any]) -> dict[str, Any]:
    """The structural schema of Kubernetes' type `name` (such as `Affinity`), every nested type inlined;
    `quantity`: the schema of a resource.Quantity value."""
    model = _model(name)
    properties = {
        model.attribute_map[attr]: _type(spelled, name, model.attribute_map[attr], quantity)
        for attr, spelled in model.openapi_types.items()
    }
    return {"type": "object", "properties": dict(sorted(properties.items()))}


def schemas(names: list[str], quantity: dict[str, Any]) -> dict[str, Any]:
    return {
        "kubernetesClient": kubernetes.__version__,
        "types": {name: schema(name, quantity) for name in names},
    }
