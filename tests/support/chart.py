"""What tests/unit/test_chart.py and tests/component/test_chart.py share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from helpers import ROOT

CRD_FILE = ROOT / "crds" / "tritonpipelines.serving.tritonpipeline.io.yaml"


def values_keys(
    node: dict[str, Any], schema: dict[str, Any], where: str = ""
) -> Iterator[tuple[str, Any, bool]]:
    """(dotted key as --set writes it, its default, whether the schema requires it) for every default
    key, nested ones included."""
    for key, value in node.items():
        sub = schema.get("properties", {}).get(key, {})
        dotted = where + key.replace(".", "\\.")
        yield dotted, value, key in schema.get("required", [])
        if isinstance(value, dict):
            yield from values_keys(value, sub, dotted + ".")
