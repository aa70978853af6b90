"""The imported document as YAML: the examples' style, under a header naming where it came from and
what was not carried."""

from __future__ import annotations

import json
from typing import Any

import yaml

from ..yamltext import STR_TAG, PlainDumper, str_style
from .findings import COMPLETED, NOT_CARRIED, WARNING, ImportResult

FLOW_WIDTH = 100  # a mapping of scalars up to this wide is written on one line (below the top levels)
FLOW_DEPTH = 3  # mappings nested at least this deep may be written on one line (tensors, step inputs)


class _FlowMap(dict[str, Any]):
    """A mapping written on one line."""


class _Dumper(PlainDumper):
    """The project's plain YAML, with short mappings and lists on one line (_FlowMap, flat lists)."""


def _flat(value: Any) -> bool:
    return not isinstance(value, (dict, list)) or (
        isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value)
    )


def _styled(value: Any, depth: int = 0) -> Any:
    """`value` with its short mappings of scalars below FLOW_DEPTH made _FlowMaps (as the examples write
    tensors and step inputs); lists of scalars are always written on one line."""
    if isinstance(value, dict):
        out = {k: _styled(v, depth + 1) for k, v in value.items()}
        short = all(_flat(v) for v in value.values()) and len(json.dumps(value)) <= FLOW_WIDTH
        return _FlowMap(out) if depth >= FLOW_DEPTH and short else out
    if isinstance(value, list):
        return [_styled(v, depth + 1) for v in value]
    return value


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    flow = isinstance(data, _FlowMap) or not data
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    """Text of several lines (extraConfig) as a literal block, as written in a config.pbtxt."""
    style = "|" if "\n" in data else str_style(data)
    return dumper.represent_scalar(STR_TAG, data, style=style)


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=_flat(data))


_Dumper.add_representer(dict, _represent_dict)
_Dumper.add_representer(_FlowMap, _represent_dict)
_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(str, _represent_str)


def document_yaml(result: ImportResult, source: str) -> str:
    """The imported document as YAML, with a comment header: where it came from, what was not carried and
    what the import warned about (a setting it could not read, a problem `validate` reports), each counted
    and listed as the import printed it; only where there is neither, that every setting is carried."""
    assert result.document is not None
    spec = result.document["spec"]
    head = [
        f"# Imported by `tritonpipeline import` from {source}: {len(spec['models'])} model(s), "
        f"{len(spec['pipelines'])} ensemble(s).",
    ]
    head += [f"# Completed: {' '.join(str(f).split())}" for f in result.of_kind(COMPLETED)]
    for kind, what in ((NOT_CARRIED, "setting(s) not carried"), (WARNING, "warning(s)")):
        named = result.of_kind(kind)
        if named:
            head.append(f"# {len(named)} {what} (also printed on stderr by the import):")
            head += [f"#   {' '.join(str(f).split())}" for f in named]
    if not result.of_kind(NOT_CARRIED) and not result.of_kind(WARNING):
        head.append("# Every setting of the configs is carried.")
    body = yaml.dump(_styled(result.document), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return "\n".join(head) + "\n" + body
