"""The Helm chart on real parts: helm built from Go modules (`make helm`), every rendered object checked by
the real kube-apiserver (server-side dry run, strict field validation), `helm install` into it, and the
operator run as a subprocess with exactly the chart's RBAC: the chart's ServiceAccount token is its only
credential. It reconciles a pipeline, and the same identity is refused outside its grant.
Here the pure tests; those on real components are in tests/component/test_chart.py."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from harness.gotools import missing_tool
from harness.helm import CHART
from helpers import ROOT
from support.chart import CRD_FILE, values_keys
from tritonpipeline.render.crd import crd_yaml
from tritonpipeline.settings import DEFAULT_ASSEMBLER_IMAGE
from tritonpipeline.spec import kubernetes as k8s

# --- the chart's files (no helm needed) ----------------------------------------------------------------


def test_chart_crd_is_the_one_generated_from_the_spec():
    """The chart installs the CRD that `tritonpipeline crd` generates from spec.py (checked against the
    generator, not against the other committed copy)."""
    copies = sorted((CHART / "crds").iterdir())
    assert [p.name for p in copies] == ["kopfpeerings.kopf.dev.yaml", CRD_FILE.name]
    assert copies[1].read_text() == crd_yaml(), (
        "charts/triton-pipeline/crds/ is out of date: run `make generate`"
    )


def test_chart_versions_match_the_package():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert version is not None and chart["appVersion"] == version.group(1)
    # the chart's default assembler image (the operator's repository with -assembler, its tag) is the one
    # the operator assumes when nothing configures it
    assert f"{values['image']['repository']}-assembler:{chart['appVersion']}" == DEFAULT_ASSEMBLER_IMAGE


def test_every_values_key_is_commented():
    """Every key in values.yaml, nested ones included, has a comment right above it."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    missing = []
    for i, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z][\w.-]*:", line):
            above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            if not above.strip().startswith("#"):
                missing.append(f"{i + 1}: {line.strip()}")
    assert not missing, "keys without a comment in values.yaml:\n" + "\n".join(missing)


def test_values_schema_covers_every_default_key():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: dict[str, Any], sch: dict[str, Any], where: str) -> list[str]:
        out = []
        props = sch.get("properties", {})
        for key, value in node.items():
            if key not in props:
                out.append(f"{where}{key}")
            elif isinstance(value, dict) and props[key].get("additionalProperties") is False:
                out += walk(value, props[key], f"{where}{key}.")
        return out

    assert schema["additionalProperties"] is False
    assert walk(values, schema, "") == []


def test_image_patterns_are_the_specs():
    """One home for the image reference grammar (spec/kubernetes.py): the chart states the same."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    image = schema["image"]["properties"]
    assert image["repository"]["pattern"] == rf"^\s*$|^{k8s.IMAGE_REPOSITORY}$"
    assert image["tag"]["pattern"] == rf"^$|^{k8s.IMAGE_TAG}$"
    assert schema["assemblerImage"]["pattern"] == rf"^$|^{k8s.IMAGE_REFERENCE}$"


def test_a_key_with_a_non_empty_default_is_required():
    """`--set key=null` (or `key: null` in a values file) deletes the default: a required key is then
    refused by name ("missing property"), where before the templates failed on a nil pointer
    (webhook, the probes, metrics.*) or quietly rendered the operator's container with no
    securityContext at all."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    optional = [
        k for k, v, required in values_keys(values, schema) if v not in ({}, [], "", None) and not required
    ]
    # inside the security contexts and resources, single fields may go: the schema's rules still hold
    assert [
        k for k in optional if not k.startswith(("podSecurityContext.", "securityContext.", "resources."))
    ] == []


def test_missing_helm_reason_is_exact():
    reason = missing_tool("helm")
    assert reason is None or ("make helm" in reason and "Go is not installed" in reason)
