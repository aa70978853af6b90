"""values.yaml is the one source of the chart's values.schema.json, its README.md and
docs/reference/values.md (tools/chart_values.py): what the generator makes of annotations, defaults and
comments, and the clear error it stops with on a bad annotation. Pure: no helm (tests/component/test_chart.py
runs helm on the generated schema)."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from helpers import ROOT

if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))
import chart_values

CHART = ROOT / "charts" / "triton-pipeline"

SOURCE = """## a header
# @schema.root
# title: t
# properties:
#   global: {type: object}
# definitions:
#   port: {minimum: 1, maximum: 65535}
#   names: {items: {type: string, minLength: 1}}
# @schema.root

# @schema {$ref: '#/definitions/port'}
# -- The port.
port: 80
# -- Nothing by default.
name: ""
# -- Settings.
settings:
  # @schema
  # type: number
  # exclusiveMinimum: 0
  # @schema
  # -- Seconds,
  # over two lines.
  seconds: 60
  # @schema {$ref: '#/definitions/names', required: true}
  # -- Names.
  names: []
  # @schema {required: false}
  # -- Off.
  verbose: false
# @schema {additionalProperties: true, properties: {extra: {type: integer}}, required: [extra]}
# -- Open.
open:
  # -- Kept.
  kept: x
"""


def test_the_schema_is_the_annotations_defaults_and_comments() -> None:
    assert chart_values.values_schema(SOURCE) == {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "t",
        "properties": {
            "port": {"type": "integer", "description": "The port.", "minimum": 1, "maximum": 65535},
            "name": {"type": "string", "description": "Nothing by default."},
            "settings": {
                "type": "object",
                "description": "Settings.",
                "additionalProperties": False,
                "properties": {
                    "seconds": {
                        "description": "Seconds, over two lines.",
                        "type": "number",
                        "exclusiveMinimum": 0,
                    },
                    "names": {
                        "type": "array",
                        "description": "Names.",
                        "items": {"type": "string", "minLength": 1},
                    },
                    "verbose": {"type": "boolean", "description": "Off."},
                },
                "required": ["seconds", "names"],
            },
            "open": {
                "type": "object",
                "description": "Open.",
                "properties": {
                    "kept": {"type": "string", "description": "Kept."},
                    "extra": {"type": "integer"},
                },
                "required": ["kept", "extra"],
            },
            "global": {"type": "object"},
        },
        "type": "object",
        "additionalProperties": False,
        # non-empty defaults: required; "" is not
        "required": ["port", "settings", "open"],
    }


def test_a_definitions_property_takes_the_keys_own_description() -> None:
    text = """# @schema.root
# definitions:
#   profile: {type: object, required: [type], properties: {type: {enum: [A, B]}, other: {type: string}}}
# @schema.root
# @schema {$ref: '#/definitions/profile', additionalProperties: true}
# -- A profile.
profile:
  # -- Its type.
  type: A
"""
    (profile,) = chart_values.values_schema(text)["properties"].values()
    assert profile["properties"] == {
        "type": {"type": "string", "description": "Its type.", "enum": ["A", "B"]},
        "other": {"type": "string"},
    }
    assert profile["required"] == ["type"] and "additionalProperties" not in profile


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "# @schema {minimun: 1}\n# -- A.\na: 2\n",
            "values.yaml, the `# @schema` of a: `minimun` is no JSON Schema (draft-07) keyword",
        ),
        (
            "# @schema {items: {patern: x}}\n# -- A.\na: []\n",
            "values.yaml, the `# @schema` of a.items: `patern` is no JSON Schema (draft-07) keyword",
        ),
        (
            "# -- A.\n# @schema {minimum: 1}\na: 2\n",
            "values.yaml line 2: `# @schema` goes above the `# --` comment",
        ),
        ("# @schema\n# minimum: 1\n# -- A.\na: 2\n", "values.yaml: a `# @schema` block is not closed"),
        ("# @schema [1]\n# -- A.\na: 2\n", "values.yaml line 1: a `# @schema` annotation must be a mapping"),
        (
            "# @schema {$ref: '#/definitions/nope'}\n# -- A.\na: 2\n",
            "values.yaml: `$ref: #/definitions/nope` names no entry of the `# @schema.root` definitions",
        ),
    ],
)
def test_a_bad_annotation_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        chart_values.values_schema(text)


def test_the_chart_readme_installs_the_charts_version_and_lists_every_value() -> None:
    chart_yaml = (CHART / "Chart.yaml").read_text()
    values = (CHART / "values.yaml").read_text()
    text = chart_values.readme(chart_yaml, values)
    version = yaml.safe_load(chart_yaml)["version"]
    assert f"helm install tp oci://REGISTRY/charts/triton-pipeline --version {version}" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [v.name for v in chart_values.chart_values(values)]
    # the docs page shows the same table
    assert chart_values.values_table(values) in (ROOT / "docs" / "reference" / "values.md").read_text()
