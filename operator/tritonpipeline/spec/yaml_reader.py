"""YAML as kubectl reads it (go-yaml through sigs.k8s.io/yaml): the same plain scalars, duplicate keys
refused at their field path (YAML would keep the last one), each document of a text with its place."""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

import yaml

from ..errors import Problem, SpecError, kind_of
from ..yamltext import STR_TAG


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    # only keys written in this mapping count: a `<<` merge key's entries may be overridden on purpose
    explicit = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node in explicit:
        if key_node.tag in (_INT, _FLOAT):  # 1519: (an ONNX tensor's name) is the key "1519", as for kubectl
            key_node.tag = STR_TAG
        elif key_node.tag == _BOOL:  # kubectl would make `n:` the key "false"
            message = f"the key {key_node.value!r} is read as a boolean, by kubectl too: quote it"
            raise yaml.constructor.ConstructorError(None, None, message, key_node.start_mark)
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, Hashable):  # `? [a]` or `? {a: 1}`: no field name
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"a mapping key must be a string (a field name), got {kind_of(key)}",
                key_node.start_mark,
            )
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

# Plain scalars read as kubectl reads them (go-yaml, through sigs.k8s.io/yaml), so that `validate` and the
# cluster agree on a file: `y` and `n` are booleans too (a tensor named y is refused as kubectl refuses
# it, not accepted here and refused there), 1e3 is a number (PyYAML's YAML 1.1 needs a dot), 1:20 is text
# (no sexagesimal numbers) and so is 2024-01-01 (no timestamps: JSON has none).
_BOOL, _INT, _FLOAT, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float", "null"))
_StrictLoader.yaml_implicit_resolvers = {
    first: [
        (tag, pattern)
        for tag, pattern in resolvers
        if tag not in (_BOOL, _INT, _FLOAT) and "timestamp" not in tag
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    _BOOL,
    re.compile(r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
    list("yYnNtTfFoO"),
)
_StrictLoader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_StrictLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_StrictLoader.bool_values = {**yaml.SafeLoader.bool_values, "y": True, "n": False}
UNQUOTED_SCALAR = (
    " (YAML, kubectl's too, reads a plain y, n, yes, no, on, off, true, false or number as no string: "
    "quote it)"
)


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


TOO_DEEP = (
    "invalid YAML: values nested more deeply than can be read (lists or mappings inside one another, "
    "hundreds of levels); a TritonPipeline needs a few dozen"
)


def load_documents(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """Parse YAML text (one or several documents) refusing duplicate keys; empty documents are skipped."""
    return [doc for _, doc in load_labelled(text, source)]


def load_labelled(text: str, source: str = "<input>") -> list[tuple[str, dict[str, Any]]]:
    """Each non-empty document of a YAML text with its label for messages: `document N: `, N its place
    among all the text's documents (an empty or comment-only one counts, as an editor shows them), where
    the text holds several non-empty documents; else "". Duplicate keys are refused."""
    try:
        nodes = list(yaml.compose_all(text, Loader=_StrictLoader))
        several = sum(not (isinstance(n, yaml.ScalarNode) and n.tag == _NULL) for n in nodes) > 1
        dups = [
            Problem((f"document {i + 1}: " if several and p.path else "") + p.path, p.message)
            for i, node in enumerate(nodes)
            for p in _duplicate_keys(node, "", set())
        ]
        if dups:
            raise SpecError(dups, source)
        every = list(yaml.load_all(text, Loader=_StrictLoader))  # an empty document is None, as its node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([Problem(where, f"invalid YAML: {exc.problem or exc}")], source) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem("", f"invalid YAML: {exc}")], source) from None
    except RecursionError:  # the YAML reader and the checks walk nested values recursively
        raise SpecError([Problem("", TOO_DEEP)], source) from None
    labelled = [
        (f"document {i + 1}: " if several else "", doc) for i, doc in enumerate(every) if doc is not None
    ]
    if not labelled:
        raise SpecError([Problem("", "no TritonPipeline document found")], source)
    for label, doc in labelled:
        if not isinstance(doc, dict):
            where = label.removesuffix(": ") or "document 1"
            raise SpecError(
                [Problem(where, f"expected a mapping (a TritonPipeline), got {kind_of(doc)}")], source
            )
    return labelled
