"""What tests/unit/test_chart_annotations.py and tests/component/test_chart_annotations.py share."""

from __future__ import annotations

from typing import Any

import yaml

from helpers import ROOT

CHART = ROOT / "charts" / "triton-pipeline"


PREFIX = "artifacthub.io/"


YAML_ANNOTATIONS = {"changes", "images", "crds", "crdsExamples", "links", "maintainers", "recommendations",
                    "screenshots", "signKey"}  # fmt: skip


def chart() -> dict[str, Any]:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def annotations() -> dict[str, Any]:
    """Each artifacthub.io/ annotation by its short name, the YAML ones read."""
    found = chart()["annotations"]
    assert all(isinstance(v, str) for v in found.values()), "Helm's annotations are strings"
    return {
        k.removeprefix(PREFIX): yaml.safe_load(v) if k.removeprefix(PREFIX) in YAML_ANNOTATIONS else v
        for k, v in found.items()
        if k.startswith(PREFIX)
    }
