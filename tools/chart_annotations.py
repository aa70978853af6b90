"""The Artifact Hub annotations of the chart's Chart.yaml that are read off the tree, so that they cannot
drift (`make generate` writes them, tests/unit/test_generated.py fails while they are stale):

- artifacthub.io/images: the operator image and the assembler image the chart's defaults run, named as
  the templates name them (image.digest over image.tag over the appVersion; assemblerImage, else the
  operator's repository with ASSEMBLER_SUFFIX). `make release` (e2e/release.py) writes it again into the
  chart it packages, whose defaults are both images by digest.
- artifacthub.io/license: pyproject.toml's SPDX expression.
- artifacthub.io/crdsExamples: examples/cluster/fanout.yaml, the fan-out example ready to apply.

The others (crds, changes, links, category, operator) are written by hand in Chart.yaml. Pure functions
on texts; the annotations stay where they are in Chart.yaml, the rest of the file untouched."""

from __future__ import annotations

import re
from typing import Any

import locks
import yaml

from tritonpipeline.settings import ASSEMBLER_SUFFIX
from tritonpipeline.yamltext import dump

IMAGES = "artifacthub.io/images"
LICENSE = "artifacthub.io/license"
CRDS_EXAMPLES = "artifacthub.io/crdsExamples"
# the example Artifact Hub opens from the CRD's card (under examples/): one a cluster takes as it is
EXAMPLE = "cluster/fanout.yaml"
INDENT = "  "  # of the annotations under `annotations:`; their block scalars' lines get two more


def images(values: dict[str, Any], app_version: str) -> list[dict[str, str]]:
    """The images the chart's default values run, as artifacthub.io/images lists them."""
    image = values["image"]
    repository = str(image["repository"]).strip()
    tag = str(image.get("tag") or app_version)
    digest = str(image.get("digest") or "")
    operator = f"{repository}@{digest}" if digest else f"{repository}:{tag}"
    assembler = str(values.get("assemblerImage") or f"{repository}{ASSEMBLER_SUFFIX}:{tag}")
    return [{"name": "operator", "image": operator}, {"name": "assembler", "image": assembler}]


def spdx_license(pyproject: str) -> str:
    return str(locks._toml(pyproject)["project"]["license"])


def crds_examples(example: str) -> list[dict[str, Any]]:
    """The example pipeline (a YAML text), as Artifact Hub lists examples."""
    return [yaml.safe_load(example)]


def set_annotation(chart: str, key: str, value: Any) -> str:
    """Chart.yaml's text with annotation `key` set to `value`: a string plainly, anything else as a YAML
    block scalar (`|`, what Artifact Hub reads), in place of the one there or last under `annotations:`."""
    if isinstance(value, str):
        entry = [f"{INDENT}{key}: {dump(value).splitlines()[0]}"]  # plain, or quoted where YAML needs it
    else:
        body = dump(value).rstrip("\n").splitlines()
        entry = [f"{INDENT}{key}: |", *(f"{INDENT * 2}{line}" if line else "" for line in body)]
    lines = chart.splitlines()
    if "annotations:" not in lines:
        raise ValueError("Chart.yaml: no top-level `annotations:` mapping")
    start = lines.index("annotations:") + 1
    end = start
    while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1  # blank lines after the block are not its own
    at = next((i for i in range(start, end) if re.match(rf"^{INDENT}{re.escape(key)}:", lines[i])), None)
    if at is None:
        lines[end:end] = entry
    else:
        stop = at + 1
        while stop < end and (lines[stop].startswith(INDENT * 2) or not lines[stop].strip()):
            stop += 1
        lines[at:stop] = entry
    return "\n".join(lines) + "\n"


def annotated(chart: str, values: str, pyproject: str, example: str) -> str:
    """Chart.yaml's text with the annotations read off the tree set to what the tree says now."""
    app_version = str(yaml.safe_load(chart)["appVersion"])
    chart = set_annotation(chart, LICENSE, spdx_license(pyproject))
    chart = set_annotation(chart, IMAGES, images(yaml.safe_load(values), app_version))
    return set_annotation(chart, CRDS_EXAMPLES, crds_examples(example))
