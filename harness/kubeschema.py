"""JSON schemas for kubeconform, written offline.

kubeconform validates manifests against JSON schemas that it normally downloads from the internet (the
yannh/kubernetes-json-schema registry, or a URL template per CRD). This machine cannot reach the internet,
so the schemas are made here instead: the built-in kinds from Kubernetes' own OpenAPI v2 document
(`api/openapi-spec/swagger.json` in the k8s.io/kubernetes Go module), the custom resources from their
CustomResourceDefinitions' `openAPIV3Schema`.

The layout is one self-contained file per group, version and kind, which kubeconform reads with

    -schema-location 'DIR/{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json'

where, as kubeconform fills the template in, Group is the part of apiVersion before the slash (the whole
apiVersion, "v1", for the core group), ResourceAPIVersion the part after it and ResourceKind the kind
lower-cased: DIR/apps/v1/deployment.json, DIR/v1/v1/service.json,
DIR/serving.tritonpipeline.io/v1alpha1/tritonpipeline.json.

The schemas are strict the way kubeconform's openapi2jsonschema.py makes them with --strict (an object
schema that lists `properties` refuses other fields, so a misspelt field is an error, not silently
dropped), and accept what YAML manifests write: an int-or-string is a string or an integer (`port: 8080`,
`targetPort: http`), a Quantity a string or a number (`cpu: 1`, `memory: 1Gi`). Each file pins the
root's apiVersion and kind, so a file cannot validate another kind. kubeconform compiles a schema
without `$schema` as draft 4, whose meta-schema refuses an empty `required`: those are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

Schema = dict[str, Any]

REF_PREFIX = "#/definitions/"
INT_OR_STRING: Schema = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
QUANTITY: Schema = {"oneOf": [{"type": "string"}, {"type": "number"}]}
# OpenAPI v2 definitions replaced whole: their documents say `type: string`, manifests write numbers too
SPECIAL_DEFINITIONS: dict[str, Schema] = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": INT_OR_STRING,
    "io.k8s.apimachinery.pkg.api.resource.Quantity": QUANTITY,
}

# where a schema holds other schemas: name -> schema maps, lists of schemas, single schemas
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "items")
_SCHEMA_SINGLES = ("additionalProperties", "items", "not", "additionalItems")
# keywords that would also apply to null, so a nullable schema with them is wrapped, not given a type list
_COMPOSITION = ("allOf", "anyOf", "oneOf", "not", "$ref")


def _map_subschemas(schema: Schema, fn: Callable[[Any], Any]) -> Schema:
    """A copy of `schema` with `fn` applied to each schema directly inside it (not to data such as
    `default`, `enum` or `example`, and not to the names in `properties`)."""
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: fn(sub) for name, sub in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [fn(sub) for sub in out[key]]
    for key in _SCHEMA_SINGLES:
        if isinstance(out.get(key), dict):
            out[key] = fn(out[key])
    return out


def _subschemas(schema: Schema) -> Iterator[Any]:
    """The schemas directly inside `schema` (the ones `_map_subschemas` visits)."""
    found: list[Any] = []
    _map_subschemas(schema, found.append)
    return iter(found)


def _nullable(schema: Schema) -> Schema:
    """`schema` that also accepts null (OpenAPI v3's `nullable: true`)."""
    kind = schema.get("type")
    if isinstance(kind, str) and not any(key in schema for key in _COMPOSITION):
        out = {**schema, "type": [kind, "null"]}
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [schema, {"type": "null"}]}


def _embedded_fields(schema: Schema) -> Schema:
    """An `x-kubernetes-embedded-resource` object: apiVersion, kind and metadata are implied fields."""
    implied = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    return {**schema, "properties": {**implied, **schema["properties"]}}


def _strict(schema: Schema) -> Schema:
    """`schema` (its subschemas converted) refusing fields it does not list, unless it says otherwise."""
    out = dict(schema)
    if "properties" not in out:
        return out
    if out.get("x-kubernetes-embedded-resource") is True:
        out = _embedded_fields(out)
    if "additionalProperties" not in out and out.get("x-kubernetes-preserve-unknown-fields") is not True:
        out["additionalProperties"] = False
    return out


def convert(schema: Any) -> Any:
    """One OpenAPI (v2 or v3) schema as a strict JSON schema kubeconform compiles; the input is not
    changed. Anything that is not a schema object (`additionalProperties: true`) is returned as is."""
    if not isinstance(schema, dict):
        return schema
    if schema.get("format") == "int-or-string" or schema.get("x-kubernetes-int-or-string") is True:
        out = {**INT_OR_STRING, **({"description": schema["description"]} if "description" in schema else {})}
    else:
        out = _strict(_map_subschemas(schema, convert))
        if out.get("required") == []:
            del out["required"]
    out.pop("nullable", None)
    return _nullable(out) if schema.get("nullable") is True else out


def _pinned(prop: Any, value: str) -> Schema:
    """The root's apiVersion or kind property allowing only `value`."""
    return {**(prop if isinstance(prop, dict) else {"type": "string"}), "enum": [value]}


def pin_root(schema: Schema, api_version: str, kind: str) -> Schema:
    """`schema` whose apiVersion and kind properties accept only this file's apiVersion and kind."""
    props = dict(schema.get("properties") or {})
    props["apiVersion"] = _pinned(props.get("apiVersion"), api_version)
    props["kind"] = _pinned(props.get("kind"), kind)
    return {**schema, "properties": props}


def _refs(schema: Any) -> set[str]:
    """The definition names `schema` refers to with "#/definitions/NAME", at any depth."""
    if not isinstance(schema, dict):
        return set()
    ref = schema.get("$ref")
    found = {ref[len(REF_PREFIX) :]} if isinstance(ref, str) and ref.startswith(REF_PREFIX) else set()
    for sub in _subschemas(schema):
        found |= _refs(sub)
    return found


def _closure(start: Iterable[str], refs: dict[str, set[str]]) -> set[str]:
    """Every definition reachable from the names `start` (cycles included once)."""
    seen: set[str] = set()
    pending = list(start)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        if name not in refs:
            raise ValueError(f"$ref to a missing definition: {REF_PREFIX}{name}")
        seen.add(name)
        pending.extend(refs[name] - seen)
    return seen


def schema_path(out: Path, group: str, version: str, kind: str) -> Path:
    """Where kubeconform's template above looks for group/version/kind ("" is the core group)."""
    return out / (group or version) / version / f"{kind.lower()}.json"


def api_version_of(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _write(path: Path, schema: Schema) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema, sort_keys=True))
    return path


def _convert_definitions(definitions: dict[str, Schema]) -> dict[str, Schema]:
    return {name: SPECIAL_DEFINITIONS.get(name) or convert(schema) for name, schema in definitions.items()}


def write_openapi_v2(swagger: dict[str, Any], out: Path) -> int:
    """A file per group/version/kind that a definition of Kubernetes' swagger.json names in its
    `x-kubernetes-group-version-kind`: the definition at the top, with apiVersion and kind pinned, and
    under `definitions` every definition it reaches through `$ref`. Returns the number of files."""
    definitions: dict[str, Schema] = swagger.get("definitions", {})
    converted = _convert_definitions(definitions)
    refs = {name: _refs(schema) for name, schema in converted.items()}
    written: set[Path] = set()
    for definition in definitions.values():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            group, version, kind = gvk.get("group", ""), gvk["version"], gvk["kind"]
            root = convert(pin_root(definition, api_version_of(group, version), kind))
            needed = _closure(_refs(root), refs)
            root["definitions"] = {ref: converted[ref] for ref in sorted(needed)}
            written.add(_write(schema_path(out, group, version, kind), root))
    return len(written)


def _is_crd(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("apiVersion") == "apiextensions.k8s.io/v1"
        and doc.get("kind") == "CustomResourceDefinition"
    )


def crd_schema(schema: Schema, api_version: str, kind: str) -> Schema:
    """A CRD version's openAPIV3Schema as a strict JSON schema: apiVersion and kind pinned, and metadata
    any object (the apiserver checks ObjectMeta itself; CRD schemas just say `type: object`)."""
    root = pin_root(schema, api_version, kind)
    root["properties"]["metadata"] = {"type": "object"}
    return dict(convert(root))


def write_crds(crds: Iterable[Any], out: Path) -> int:
    """A file per served version of each apiextensions.k8s.io/v1 CustomResourceDefinition among `crds`
    (parsed YAML documents; anything else, None included, is skipped). Returns the number of files."""
    written: set[Path] = set()
    for doc in crds:
        if not _is_crd(doc):
            continue
        group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
        for version in doc["spec"].get("versions", []):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if not version.get("served", True) or schema is None:
                continue
            root = crd_schema(schema, api_version_of(group, version["name"]), kind)
            written.add(_write(schema_path(out, group, version["name"], kind), root))
    return len(written)
