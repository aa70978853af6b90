"""The chart's values.yaml as the one commented source of its schema and its documentation (`make
generate` writes charts/triton-pipeline/values.schema.json and README.md from it, and
docs/reference/values.md through tools/reference.py).

Above each key, in this order:

    # @schema {minimum: 1, maximum: 65535}      one line: a YAML mapping of JSON Schema keywords, or
    # @schema                                   a block of them between two `# @schema` lines
    # pattern: ^[a-z]+$
    # @schema
    # -- What the key is for (helm-docs' comment: the description, continued by `# ` lines).
    key: default

What the generator adds by itself: `type` from the default (unless the annotation has `type`, `const`,
`oneOf` or `anyOf`), the description, `additionalProperties: false` on a mapping with keys (an
annotation `additionalProperties: true` lifts it), and the key in its parent's `required` when its
default is not empty (`required: false` or `true` in the annotation says otherwise). `$ref:
'#/definitions/NAME'` is replaced by that definition of the `# @schema.root` block (at the top of
the file, between two `# @schema.root` lines: the root's `title`, extra `properties`, `definitions`),
so the schema states every rule in place. Pure functions."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

VALUE_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")
DOC_START = re.compile(r"^\s*# -- (?P<text>.*)$")
DOC_MORE = re.compile(r"^\s*#(?: (?P<text>.*))?$")
SCHEMA_MARK = re.compile(r"^\s*# @schema(?P<root>\.root)?\s*$")
SCHEMA_LINE = re.compile(r"^\s*# @schema (?P<yaml>\S.*)$")
COMMENT_TEXT = re.compile(r"^\s*# ?")
NO_COMMENT = "{path}: no `# --` comment above it in values.yaml (helm-docs convention)"
DRAFT = "http://json-schema.org/draft-07/schema#"
# the annotation keywords after which the default's type is not added
TYPED = ("type", "const", "oneOf", "anyOf")
JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
EMPTY: tuple[Any, ...] = ({}, [], "", None)
# draft-07's keywords: an annotation with any other key (a typo: `minimun`) is refused
KEYWORDS = frozenset(
    [
        "$schema",
        "$id",
        "$ref",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "readOnly",
        "writeOnly",
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "items",
        "additionalItems",
        "maxItems",
        "minItems",
        "uniqueItems",
        "contains",
        "maxProperties",
        "minProperties",
        "required",
        "properties",
        "patternProperties",
        "additionalProperties",
        "dependencies",
        "propertyNames",
        "if",
        "then",
        "else",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "format",
        "contentMediaType",
        "contentEncoding",
        "definitions",
    ]
)
# keywords whose value maps names to schemas, and those whose value is a schema or a list of them
NAMED = ("properties", "patternProperties", "definitions", "dependencies")
SUBSCHEMAS = ("items", "additionalItems", "contains", "propertyNames", "if", "then", "else", "not")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "items")


@dataclass(frozen=True)
class Value:
    """One key of values.yaml: its path, its `# --` comment, its default and its `# @schema` keywords."""

    path: tuple[str, ...]
    description: str
    default: Any
    schema: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def parent(self) -> bool:
        """A mapping whose keys are listed on their own."""
        return isinstance(self.default, dict) and bool(self.default)


def _lookup(doc: Any, path: Sequence[str]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _mapping(text: str, where: str) -> dict[str, Any]:
    try:
        found = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"values.yaml {where}: the `# @schema` annotation is not YAML: {exc}") from exc
    if not isinstance(found, dict):
        raise ValueError(
            f"values.yaml {where}: a `# @schema` annotation must be a mapping of JSON Schema keywords"
        )
    return found


def parse(text: str) -> tuple[dict[str, Any], list[Value]]:
    """The `# @schema.root` block and every key of a values.yaml text, in file order, with the `# --`
    comment block directly above it (continued by `# ` lines; a blank or other line ends it), its
    default and the `# @schema` annotations above that comment."""
    doc = yaml.safe_load(text) or {}
    found: list[Value] = []
    keys: list[tuple[int, str]] = []
    comment: list[str] | None = None
    annotation: dict[str, Any] = {}
    root: dict[str, Any] = {}
    block: list[str] | None = None  # the lines of an open `# @schema` block
    block_root = False
    for number, line in enumerate(text.splitlines(), 1):
        mark, one = SCHEMA_MARK.match(line), SCHEMA_LINE.match(line)
        if block is not None:
            if mark and bool(mark["root"]) == block_root:
                (root if block_root else annotation).update(_mapping("\n".join(block), f"line {number}"))
                block = None
            else:
                block.append(COMMENT_TEXT.sub("", line, count=1))
            continue
        start, more, key = DOC_START.match(line), DOC_MORE.match(line), VALUE_KEY.match(line)
        if (mark or one) and comment is not None:
            raise ValueError(f"values.yaml line {number}: `# @schema` goes above the `# --` comment")
        if mark:
            block, block_root = [], bool(mark["root"])
        elif one:
            annotation.update(_mapping(one["yaml"], f"line {number}"))
        elif start:
            comment = [start["text"]]
        elif more and comment is not None and not line.lstrip().startswith("##"):
            comment.append(more["text"] or "")
        elif key:
            indent = len(key["indent"])
            while keys and keys[-1][0] >= indent:
                keys.pop()
            keys.append((indent, key["key"]))
            path = tuple(k for _, k in keys)
            description = " ".join(" ".join(comment or []).split())
            found.append(Value(path, description, _lookup(doc, path), annotation))
            comment, annotation = None, {}
        else:
            comment = None
    if block is not None:
        raise ValueError("values.yaml: a `# @schema` block is not closed")
    return root, found


def chart_values(text: str) -> list[Value]:
    """Every key of a values.yaml text (see `parse`)."""
    return parse(text)[1]


def undocumented(text: str) -> list[str]:
    """The keys of a values.yaml text without a `# --` comment, as `NO_COMMENT` lines."""
    return [NO_COMMENT.format(path=v.name) for v in chart_values(text) if not v.description]


# -- values.schema.json


def check_keywords(node: Any, where: str) -> None:
    """ValueError naming the first key of a schema (and its subschemas) that is no JSON Schema keyword."""
    if not isinstance(node, dict):
        return
    for key, sub in node.items():
        if key not in KEYWORDS:
            raise ValueError(f"values.yaml, {where}: `{key}` is no JSON Schema (draft-07) keyword")
        if key in NAMED and isinstance(sub, dict):
            for name, named in sub.items():
                check_keywords(named, f"{where}.{key}.{name}")
        elif key in SUBSCHEMAS and isinstance(sub, dict):
            check_keywords(sub, f"{where}.{key}")
        elif key in SCHEMA_LISTS and isinstance(sub, list):
            for i, item in enumerate(sub):
                check_keywords(item, f"{where}.{key}[{i}]")


def resolve(node: Any, definitions: Mapping[str, Any]) -> Any:
    """`node` with every `$ref: '#/definitions/NAME'` replaced by that definition (its other keywords
    added), recursively."""
    if isinstance(node, list):
        return [resolve(n, definitions) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    if "$ref" in node:
        ref = str(node["$ref"])
        name = ref.removeprefix("#/definitions/")
        if name == ref or name not in definitions:
            raise ValueError(f"values.yaml: `$ref: {ref}` names no entry of the `# @schema.root` definitions")
        out.update(resolve(copy.deepcopy(definitions[name]), definitions))
    for key, sub in node.items():
        if key != "$ref":
            out[key] = resolve(sub, definitions)
    return out


def _node(value: Value, definitions: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema of one key, and whether its parent requires it."""
    annotation = resolve(dict(value.schema), definitions)
    check_keywords(annotation, f"the `# @schema` of {value.name}")
    flag = annotation.pop("required", None)
    extra_required = []
    if isinstance(flag, list):  # JSON Schema's own `required` (names of properties the annotation adds)
        extra_required, flag = flag, None
    node: dict[str, Any] = {}
    kind = JSON_TYPES.get(type(value.default))
    if kind and not any(k in annotation for k in TYPED):
        node["type"] = kind
    if value.description:
        node["description"] = value.description
    extra_properties = annotation.pop("properties", {})
    node.update(annotation)
    if value.parent and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if node.get("additionalProperties") is True:
        del node["additionalProperties"]  # JSON Schema's default
    if extra_properties:
        node["properties"] = dict(extra_properties)
    if extra_required:
        node["required"] = list(extra_required)
    required = flag if isinstance(flag, bool) else value.default not in EMPTY
    return node, required


def values_schema(text: str) -> dict[str, Any]:
    """values.schema.json of a values.yaml text: its annotations, its defaults' types, its comments."""
    root_annotation, values = parse(text)
    check_keywords(root_annotation, "the `# @schema.root` block")
    definitions = root_annotation.get("definitions", {})
    root: dict[str, Any] = {"$schema": DRAFT}
    root.update({k: v for k, v in resolve(root_annotation, definitions).items() if k != "definitions"})
    root.setdefault("type", "object")
    root.setdefault("additionalProperties", False)
    nodes: dict[tuple[str, ...], dict[str, Any]] = {(): root}
    children: dict[tuple[str, ...], list[tuple[str, dict[str, Any], bool]]] = {}
    for value in values:
        node, needed = _node(value, definitions)
        nodes[value.path] = node
        children.setdefault(value.path[:-1], []).append((value.path[-1], node, needed))
    for path, kids in children.items():
        parent = nodes[path]
        extra = parent.pop("properties", {})
        # a key's own node wins over what its parent's annotation says of it (a definition's property)
        for name, node, _ in kids:
            for key, sub in extra.get(name, {}).items():
                node.setdefault(key, sub)
        named = {name: node for name, node, _ in kids}
        parent["properties"] = {**named, **{k: v for k, v in extra.items() if k not in named}}
        names = [name for name, _, needed in kids if needed]
        names += [r for r in parent.pop("required", []) if r not in names]
        if names:
            parent["required"] = names
    return root


def schema_json(text: str) -> str:
    return json.dumps(values_schema(text), indent=2) + "\n"


# -- the values table (the chart's README and docs/reference/values.md)


def cell(text: object) -> str:
    """Text for one table cell: one line, `|` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: object) -> str:
    """Inline code for a table cell (a backtick inside gets a longer fence)."""
    text = cell(text)
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def value_type(schema: Mapping[str, Any], path: Sequence[str], default: Any) -> str:
    """The key's type in the schema (`a \\| b` for a oneOf or a list of types), else its default's."""
    node: Mapping[str, Any] | None = schema
    for key in path:
        node = (node or {}).get("properties", {}).get(key)
    kinds: Any = (node or {}).get("type") or [s.get("type") for s in (node or {}).get("oneOf", [])]
    kinds = [kinds] if isinstance(kinds, str) else [k for k in kinds if k]
    return " \\| ".join(kinds) if kinds else JSON_TYPES.get(type(default), "")


def values_table(text: str) -> str:
    """One row per key of a values.yaml text: its name, type, default and description."""
    schema = values_schema(text)
    rows = [
        [
            code(v.name),
            value_type(schema, v.path, v.default),
            "" if v.parent else code(json.dumps(v.default)),
            cell(v.description),
        ]
        for v in chart_values(text)
    ]
    return table(["key", "type", "default", ""], rows)


# -- the chart's README.md

README = """<!-- generated by `make generate` from Chart.yaml and values.yaml; do not edit -->
# {name}

{description}

Documentation: {docs}, among it [Install on a cluster]({docs}getting-started/cluster.html),
[Chart values]({docs}reference/values.html) (the table below) and [Upgrades]({docs}how-to/upgrade.html).

## Install

The chart installs the CRD (from `crds/`), the operator's Deployment, its RBAC, its admission webhook
and its NetworkPolicy. From the OCI registry the release pushes it to (REGISTRY below: yours):

```sh
helm install tp oci://REGISTRY/charts/{name} --version {version} \\
  -n triton-system --create-namespace
```

Kubernetes {kube}. `values.schema.json` refuses unknown keys and wrong types at `helm install`, and the
templates fail on combinations that cannot work, naming the values.

## Values

Set them with `--set KEY=VALUE` or `-f my-values.yaml`.

{values}
"""


def readme(chart_yaml: str, values_text: str) -> str:
    """The chart's README.md: what it is, how to install it, every value."""
    chart = yaml.safe_load(chart_yaml)
    return README.format(
        name=chart["name"],
        description=" ".join(str(chart["description"]).split()),
        docs=chart["home"],
        version=chart["version"],
        kube=chart.get("kubeVersion", "any").replace(">=", ">= ").replace("-0", ""),
        values=values_table(values_text),
    )
