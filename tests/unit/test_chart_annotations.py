"""The chart's Artifact Hub annotations (Chart.yaml) are what Artifact Hub documents
(artifacthub.io/docs/topics/annotations/helm: each a string, the YAML ones of the documented shape), and
the ones read off the tree say what the tree says: the images the chart runs, the project's license, the
example pipeline. Pure, except the last test, which renders the chart with the real helm.
Here the pure tests; those on real components are in tests/component/test_chart_annotations.py."""

from __future__ import annotations

import re

import chart_annotations
import pytest
import yaml

from helpers import ROOT
from support.chart_annotations import annotations, chart
from tritonpipeline.render.crd import crd
from tritonpipeline.spec import kubernetes as k8s
from tritonpipeline.spec import parse_pipeline

# what Artifact Hub's Helm annotations page lists, and which of them hold YAML
DOCUMENTED = {
    "alternativeName", "category", "changes", "containsSecurityUpdates", "images", "crds", "crdsExamples",
    "license", "links", "maintainers", "operator", "operatorCapabilities", "prerelease", "recommendations",
    "screenshots", "signKey",
}  # fmt: skip


CATEGORIES = {"ai-machine-learning", "database", "integration-delivery", "monitoring-logging", "networking",
              "security", "storage", "streaming-messaging", "skip-prediction"}  # fmt: skip


CHANGE_KINDS = {"added", "changed", "deprecated", "removed", "fixed", "security"}


SPDX_ID = re.compile(r"^[A-Za-z0-9.+-]+$")


def test_every_annotation_is_a_documented_one_of_its_documented_shape() -> None:
    found = annotations()
    assert set(found) <= DOCUMENTED, set(found) - DOCUMENTED
    assert {"images", "license", "changes", "crds", "crdsExamples", "links"} <= set(found)
    assert found["category"] in CATEGORIES
    assert found["operator"] in ("true", "false")
    for change in found["changes"]:
        assert change.keys() <= {"kind", "description", "links"} and change["kind"] in CHANGE_KINDS, change
        assert isinstance(change["description"], str) and change["description"]
    for image in found["images"]:
        assert image.keys() <= {"name", "image", "whitelisted", "platforms"} and image["name"], image
        assert re.fullmatch(k8s.IMAGE_REFERENCE, image["image"]), image
    for link in found["links"]:
        assert link.keys() == {"name", "url"} and link["name"], link
    for entry in found["crds"]:
        assert entry.keys() == {"kind", "version", "name", "displayName", "description"}, entry
    assert SPDX_ID.fullmatch(found["license"])


def test_the_crd_card_and_its_example_are_the_crds() -> None:
    definition = crd()
    found = annotations()
    (card,) = found["crds"]
    assert card["name"] == definition["metadata"]["name"]
    assert card["kind"] == definition["spec"]["names"]["kind"]
    assert card["version"] in [v["name"] for v in definition["spec"]["versions"] if v["served"]]
    (shown,) = found["crdsExamples"]
    assert shown["apiVersion"] == f"{definition['spec']['group']}/{card['version']}"
    assert shown["kind"] == card["kind"]


def test_the_crds_example_is_the_cluster_fanout_example() -> None:
    """Generated from examples/cluster/fanout.yaml (`make generate`), so that it cannot drift: that file's
    pipeline, one the operator accepts."""
    (shown,) = annotations()["crdsExamples"]
    assert shown == yaml.safe_load((ROOT / "examples" / "cluster" / "fanout.yaml").read_text())
    assert parse_pipeline({**shown, "metadata": {**shown["metadata"], "namespace": "ml"}}).name == "vision"


def test_the_license_is_the_project_s() -> None:
    found = re.search(r'^license = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None and annotations()["license"] == found.group(1) == "Apache-2.0"


def test_every_link_is_a_page_of_the_docs_site() -> None:
    home = chart()["home"]
    for link in annotations()["links"]:
        assert link["url"].startswith(home), link
        page = link["url"].removeprefix(home) or "index.html"
        assert (ROOT / "docs" / page.replace(".html", ".md")).is_file(), link


def test_set_annotation_replaces_one_in_place_and_adds_a_missing_one_last() -> None:
    text = """name: c
annotations:
  a/first: x
  a/list: |
    - one

    - two
  a/last: "y"

# after
"""
    replaced = chart_annotations.set_annotation(text, "a/list", [{"name": "op"}])
    assert replaced == text.replace("    - one\n\n    - two\n", "    - name: op\n")
    added = chart_annotations.set_annotation(text, "a/new", "Apache-2.0")
    assert added == text.replace('  a/last: "y"\n', '  a/last: "y"\n  a/new: Apache-2.0\n')
    quoted = chart_annotations.set_annotation(text, "a/first", "true")
    assert "  a/first: 'true'\n" in quoted and yaml.safe_load(quoted)["annotations"]["a/first"] == "true"
    with pytest.raises(ValueError, match="no top-level `annotations:`"):
        chart_annotations.set_annotation("name: c\n", "a/b", "x")


def test_the_images_are_named_as_the_templates_name_them() -> None:
    values = {"image": {"repository": "r.example/op", "tag": "", "digest": ""}, "assemblerImage": ""}
    assert [i["image"] for i in chart_annotations.images(values, "1.2.3")] == [
        "r.example/op:1.2.3",
        "r.example/op-assembler:1.2.3",
    ]
    values["image"] |= {"tag": "1.2.3-rc1", "digest": "sha256:" + "a" * 64}
    values["assemblerImage"] = "r.example/asm@sha256:" + "b" * 64
    assert [i["image"] for i in chart_annotations.images(values, "1.2.3")] == [
        "r.example/op@sha256:" + "a" * 64,
        "r.example/asm@sha256:" + "b" * 64,
    ]
