"""harness/kubeschema.py: the JSON schemas written for kubeconform from a (hand-written, small) OpenAPI v2
document and CustomResourceDefinitions accept what the apiserver accepts from YAML (`port: 8080` and
`port: http`, `cpu: 1` and `cpu: 500m`, null where the CRD says nullable) and refuse misspelt fields at
any depth and the wrong kind. Documents are validated with the `jsonschema` package's draft-4 validator
(the draft kubeconform compiles these files as) when it is installed, else with the small draft-4 subset
below that covers every keyword these schemas use."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from harness.kubeschema import write_crds, write_openapi_v2

# --- a draft-4 validator ----------------------------------------------------------------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _errors(schema: dict[str, Any], doc: Any, root: dict[str, Any], at: str = "") -> list[str]:
    """Why `doc` fails `schema` (draft 4: a `$ref` replaces its siblings), [] when it passes."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/definitions/")
        return _errors(root["definitions"][name], doc, root, at)
    errors: list[str] = []
    types = schema.get("type")
    if types is not None and not any(_TYPES[t](doc) for t in ([types] if isinstance(types, str) else types)):
        errors.append(f"{at}: {doc!r} is not {types}")
    if "enum" in schema and doc not in schema["enum"]:
        errors.append(f"{at}: {doc!r} not in {schema['enum']}")
    errors += [e for sub in schema.get("allOf", []) for e in _errors(sub, doc, root, at)]
    passing = [not _errors(sub, doc, root, at) for sub in schema.get("anyOf", [])]
    if "anyOf" in schema and not any(passing):
        errors.append(f"{at}: {doc!r} matches none of anyOf")
    if "oneOf" in schema and sum(not _errors(sub, doc, root, at) for sub in schema["oneOf"]) != 1:
        errors.append(f"{at}: {doc!r} does not match exactly one of oneOf")
    if isinstance(doc, dict):
        errors += [f"{at}: missing {name}" for name in schema.get("required", []) if name not in doc]
        errors += _object_errors(schema, doc, root, at)
    if isinstance(doc, list) and isinstance(schema.get("items"), dict):
        errors += [e for i, item in enumerate(doc) for e in _errors(schema["items"], item, root, f"{at}/{i}")]
    return errors


def _object_errors(schema: dict[str, Any], doc: dict[str, Any], root: dict[str, Any], at: str) -> list[str]:
    errors: list[str] = []
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, value in doc.items():
        if key in props:
            errors += _errors(props[key], value, root, f"{at}/{key}")
        elif extra is False:
            errors.append(f"{at}: unknown field {key!r}")
        elif isinstance(extra, dict):
            errors += _errors(extra, value, root, f"{at}/{key}")
    return errors


def valid(schema: dict[str, Any], doc: Any) -> bool:
    if importlib.util.find_spec("jsonschema") is not None:
        validator = importlib.import_module("jsonschema").Draft4Validator
        validator.check_schema(schema)
        return bool(validator(schema).is_valid(doc))
    return not _errors(schema, doc, schema)


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


# --- OpenAPI v2 (Kubernetes' swagger.json) ----------------------------------------------------------

INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


STRING = {"type": "string"}
ROOT_FIELDS = {"apiVersion": STRING, "kind": STRING, "metadata": ref(OBJECT_META)}

SWAGGER: dict[str, Any] = {
    "swagger": "2.0",
    "definitions": {
        INT_OR_STRING: {"type": "string", "format": "int-or-string"},
        QUANTITY: {"type": "string", "description": "1, 0.5, 500m, 1Gi"},
        OBJECT_META: {
            "type": "object",
            "properties": {"name": STRING, "labels": {"type": "object", "additionalProperties": STRING}},
        },
        "test.v1.Port": {
            "type": "object",
            "required": ["port"],
            "properties": {
                "name": STRING,
                "port": ref(INT_OR_STRING),
                "targetPort": {"type": "string", "format": "int-or-string"},  # inline, not a $ref
                "count": {"type": "integer"},
            },
        },
        "test.v1.Resources": {
            "type": "object",
            "properties": {"limits": {"type": "object", "additionalProperties": ref(QUANTITY)}},
        },
        # a cycle: Node -> Leaf -> Node
        "test.v1.Node": {
            "type": "object",
            "properties": {"name": STRING, "leaves": {"type": "array", "items": ref("test.v1.Leaf")}},
        },
        "test.v1.Leaf": {"type": "object", "properties": {"value": STRING, "next": ref("test.v1.Node")}},
        # properties named like schema keywords (as in apiextensions' JSONSchemaProps)
        "test.v1.Props": {
            "type": "object",
            "properties": {
                "$ref": STRING,
                "properties": {"type": "object", "additionalProperties": ref("test.v1.Props")},
                "type": STRING,
            },
        },
        "test.v1.WidgetSpec": {
            "type": "object",
            "required": [],
            "properties": {
                "ports": {"type": "array", "items": ref("test.v1.Port")},
                "resources": {"allOf": [ref("test.v1.Resources")], "default": {}},
                "tree": ref("test.v1.Node"),
                "schema": ref("test.v1.Props"),
            },
        },
        "test.v1.Widget": {
            "type": "object",
            "properties": {**ROOT_FIELDS, "spec": ref("test.v1.WidgetSpec")},
            "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}],
        },
        "test.v1.Unused": {"type": "object", "properties": {"x": STRING}},
        "io.k8s.api.core.v1.ConfigMap": {
            "type": "object",
            "properties": {**ROOT_FIELDS, "data": {"type": "object", "additionalProperties": STRING}},
            "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMap"}],
        },
        "test.v1.Options": {
            "type": "object",
            "properties": {"apiVersion": STRING, "kind": STRING, "dryRun": {"type": "boolean"}},
            "x-kubernetes-group-version-kind": [
                {"group": "", "version": "v1", "kind": "Options"},
                {"group": "apps", "version": "v1", "kind": "Options"},
            ],
        },
    },
}


@pytest.fixture(scope="module")
def builtin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("schemas")
    swagger = copy.deepcopy(SWAGGER)
    assert write_openapi_v2(swagger, out) == 4
    assert swagger == SWAGGER  # the input is not changed
    return out


@pytest.fixture(scope="module")
def widget_schema(builtin: Path) -> dict[str, Any]:
    return load(builtin / "example.io" / "v1" / "widget.json")


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


def test_files_in_kubeconforms_layout(builtin: Path) -> None:
    files = sorted(str(p.relative_to(builtin)) for p in builtin.rglob("*.json"))
    assert files == [
        "apps/v1/options.json",
        "example.io/v1/widget.json",
        "v1/v1/configmap.json",
        "v1/v1/options.json",
    ]


def test_self_contained_with_only_the_reachable_definitions(widget_schema: dict[str, Any]) -> None:
    own = ["Port", "Resources", "Node", "Leaf", "Props", "WidgetSpec"]
    expected = [INT_OR_STRING, QUANTITY, OBJECT_META, *(f"test.v1.{name}" for name in own)]
    assert sorted(widget_schema["definitions"]) == sorted(expected)
    assert "x-kubernetes-group-version-kind" in widget_schema  # the definition itself is the root
    assert "required" not in widget_schema["definitions"]["test.v1.WidgetSpec"]  # draft 4 refuses []


def test_a_valid_widget_is_accepted(widget_schema: dict[str, Any]) -> None:
    doc = widget(
        ports=[{"name": "http", "port": 8080}, {"port": "http"}],
        resources={"limits": {"cpu": 1, "memory": "1Gi"}},
        tree={"name": "a", "leaves": [{"value": "b", "next": {"name": "c", "leaves": []}}]},
        schema={"type": "object", "$ref": "x", "properties": {"a": {"type": "string"}}},
    )
    doc["metadata"]["labels"] = {"app": "w"}
    assert valid(widget_schema, doc)


@pytest.mark.parametrize(
    "doc",
    [
        widget(ports=[{"port": 80, "protocl": "TCP"}]),
        widget(resources={"limitz": {}}),
        widget(tree={"leaves": [{"next": {"name": "c", "leaf": []}}]}),  # through the cycle
        widget(schema={"properties": {"a": {"typo": 1}}}),
        widget(unknown=1),
        {**widget(), "status": {}},
        {**widget(), "metadata": {"name": "w", "lables": {}}},
    ],
)
def test_an_unknown_field_at_any_depth_is_refused(widget_schema: dict[str, Any], doc: dict[str, Any]) -> None:
    assert not valid(widget_schema, doc)


@pytest.mark.parametrize(
    ("port", "ok"), [(8080, True), ("http", True), (80.5, False), (True, False), (None, False)]
)
def test_int_or_string(widget_schema: dict[str, Any], port: Any, ok: bool) -> None:
    assert valid(widget_schema, widget(ports=[{"port": port}])) is ok
    assert valid(widget_schema, widget(ports=[{"port": 1, "targetPort": port}])) is ok


@pytest.mark.parametrize(("cpu", "ok"), [(1, True), ("500m", True), (0.5, True), ([1], False), (True, False)])
def test_quantity(widget_schema: dict[str, Any], cpu: Any, ok: bool) -> None:
    assert valid(widget_schema, widget(resources={"limits": {"cpu": cpu}})) is ok


def test_other_types_are_kept(widget_schema: dict[str, Any]) -> None:
    assert not valid(widget_schema, widget(ports=[{"port": 1, "count": "2"}]))
    assert not valid(widget_schema, widget(ports=[{"name": "http"}]))  # required port


def test_api_version_and_kind_are_pinned(builtin: Path, widget_schema: dict[str, Any]) -> None:
    assert not valid(widget_schema, {**widget(), "kind": "Gadget"})
    assert not valid(widget_schema, {**widget(), "apiVersion": "example.io/v2"})
    configmap = load(builtin / "v1" / "v1" / "configmap.json")
    assert valid(configmap, {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}})
    assert not valid(configmap, {"apiVersion": "core/v1", "kind": "ConfigMap"})
    # one definition, two group/versions: each file pins its own
    core, apps = (load(builtin / group / "v1" / "options.json") for group in ("v1", "apps"))
    assert valid(core, {"apiVersion": "v1", "kind": "Options", "dryRun": True})
    assert not valid(core, {"apiVersion": "apps/v1", "kind": "Options"})
    assert valid(apps, {"apiVersion": "apps/v1", "kind": "Options"})


def test_a_missing_definition_is_an_error(tmp_path: Path) -> None:
    swagger = copy.deepcopy(SWAGGER)
    del swagger["definitions"]["test.v1.Leaf"]
    with pytest.raises(ValueError, match=r"test\.v1\.Leaf"):
        write_openapi_v2(swagger, tmp_path)


# --- CustomResourceDefinitions ----------------------------------------------------------------------

INT_OR_STRING_V3 = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
GADGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": STRING,
        "kind": STRING,
        "metadata": {"type": "object", "properties": {"name": STRING}},  # to be ignored: any metadata
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
                "port": INT_OR_STRING_V3,
                "bare": {"x-kubernetes-int-or-string": True},
                "limit": {**INT_OR_STRING_V3, "nullable": True},
                "note": {"type": "string", "nullable": True},
                "mode": {"type": "string", "enum": ["a", "b"], "nullable": True},
                "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "mixed": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": STRING},
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object", "properties": {"x": STRING}}},
                },
                "items": {
                    "type": "array",
                    "items": {"type": "object", "required": [], "properties": {"name": STRING}},
                },
            },
        },
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
    },
}


def crd(versions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.io"},
        "spec": {
            "group": "example.io",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "versions": versions,
        },
    }


def version(name: str, served: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "served": served,
        "storage": name == "v1",
        "schema": {"openAPIV3Schema": GADGET_SCHEMA},
    }


@pytest.fixture(scope="module")
def gadget_schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("crds")
    docs = [
        None,
        {"apiVersion": "v1", "kind": "Service"},
        crd([version("v1"), version("v1beta1"), version("v0", served=False)]),
    ]
    before = copy.deepcopy(docs)
    assert write_crds(docs, out) == 2
    assert docs == before
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.json")) == [
        "example.io/v1/gadget.json",
        "example.io/v1beta1/gadget.json",
    ]
    assert load(out / "example.io" / "v1beta1" / "gadget.json")["properties"]["apiVersion"]["enum"] == [
        "example.io/v1beta1"
    ]
    return load(out / "example.io" / "v1" / "gadget.json")


def gadget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.io/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"size": 1, **spec},
    }


def test_crd_a_valid_gadget_is_accepted(gadget_schema: dict[str, Any]) -> None:
    doc = gadget(
        port="http",
        limit=None,
        note=None,
        mode=None,
        config={"anything": [1, {"goes": None}]},
        mixed={"known": "k", "other": {"deep": 1}},
        template={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": "y"}},
        items=[{"name": "a"}],
    )
    doc["metadata"] = {"name": "g", "labels": {"a": "b"}, "annotations": {"c": "d"}, "generateName": "g-"}
    doc["status"] = {"ready": True}
    assert valid(gadget_schema, doc)


@pytest.mark.parametrize(
    "doc",
    [
        gadget(items=[{"name": "a", "nmae": "b"}]),
        gadget(template={"spec": {"x": "y", "z": 1}}),
        gadget(colour="red"),
        {**gadget(), "extra": 1},
        {**gadget(), "status": {"redy": True}},
        {**gadget(), "kind": "Widget"},
        {**gadget(), "apiVersion": "example.io/v1beta1"},
        gadget(size=None),  # not nullable
        gadget(note=1),
        gadget(mode="c"),
        gadget(limit=1.5),
        gadget(bare=[1]),
        gadget(bare=1.5),
        gadget(mixed={"known": 1}),
        {**gadget(), "spec": {}},  # required size
    ],
)
def test_crd_refuses(gadget_schema: dict[str, Any], doc: dict[str, Any]) -> None:
    assert not valid(gadget_schema, doc)


@pytest.mark.parametrize("value", [8080, "http", None])
def test_crd_int_or_string_and_nullable(gadget_schema: dict[str, Any], value: Any) -> None:
    assert valid(gadget_schema, gadget(limit=value))
    assert valid(gadget_schema, gadget(bare=value)) is (value is not None)
    assert valid(gadget_schema, gadget(port=value)) is (value is not None)


def test_crd_strictness_stops_at_preserve_unknown_fields(gadget_schema: dict[str, Any]) -> None:
    spec = gadget_schema["properties"]["spec"]["properties"]
    assert "additionalProperties" not in spec["config"]
    assert "additionalProperties" not in spec["mixed"]
    assert gadget_schema["properties"]["spec"]["additionalProperties"] is False
    assert "additionalProperties" not in gadget_schema["properties"]["metadata"]
    assert "nullable" not in json.dumps(gadget_schema)
    # other keywords are kept as they are: draft 4's boolean exclusiveMinimum is OpenAPI v3's too
    assert spec["size"] == {"type": "integer", "minimum": 0, "exclusiveMinimum": True}
