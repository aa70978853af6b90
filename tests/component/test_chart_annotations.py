"""The chart's Artifact Hub annotations (Chart.yaml) are what Artifact Hub documents
(artifacthub.io/docs/topics/annotations/helm: each a string, the YAML ones of the documented shape), and
the ones read off the tree say what the tree says: the images the chart runs, the project's license, the
example pipeline. Pure, except the last test, which renders the chart with the real helm.
Here the tests on real components; the pure ones are in tests/unit/test_chart_annotations.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.helm import Helm, deployment_of
from support.chart_annotations import annotations


@pytest.mark.helm
def test_the_listed_images_are_the_ones_the_default_render_runs(helm_binary: Path, tmp_path: Path) -> None:
    """What Artifact Hub scans is what `helm install` with the defaults pulls: the operator's container
    and the Triton pods' init container (TRITONPIPELINE_ASSEMBLER_IMAGE)."""
    docs = Helm(helm_binary, tmp_path / "helm-home").template("rel", "ops")
    (container,) = deployment_of(docs)["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    listed = {i["name"]: i["image"] for i in annotations()["images"]}
    assert listed == {"operator": container["image"], "assembler": env["TRITONPIPELINE_ASSEMBLER_IMAGE"]}
