"""The Grafana dashboard the chart ships (files/grafana-dashboard.json, from tools/dashboard.py) and the
metrics its panels and the chart's alerts read.

- Grafana's schema: the JSON checked by the TypeScript compiler against Grafana's own published types
  (@grafana/schema, @grafana/grafana-foundation-sdk; harness/grafana_schema.py, pinned in
  tools/grafana-schema/);
- the structure Grafana's sidecar and a user rely on: unique panel ids, every query on the `datasource`
  variable, no panel overlapping another, every `$variable` defined;
- every metric name a query reads is one a real tritonserver (the nvidia-pytriton wheel's, the version
  we ship) exports on its /metrics page, or one the operator exports (its metric objects, the list
  docs/reference/metrics.md is generated from); GPU metrics from the recorded page of a real tritonserver
  on an H200 (bench/results/gpu-metrics.prom), as this machine has no GPU.
Here the pure tests; those on real components are in tests/component/test_dashboard.py."""

from __future__ import annotations

import json
import re

import dashboard  # tools/ (conftest.py puts it on the path)
import yaml

from harness.helm import CHART
from helpers import example
from support.dashboard import SHIPPED, SUMMARY_LATENCIES

VARIABLE = re.compile(r"\$\{?(\w+)")


GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "1"}  # built in ($1: label_replace's)


# --- structure ------------------------------------------------------------------------------------


def test_panels_have_unique_ids_and_do_not_overlap(board):
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    cells: dict[tuple[int, int], str] = {}
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_query_reads_the_datasource_variable(board):
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    source = {"type": "prometheus", "uid": "${datasource}"}
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == source, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == source, panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == source, variable["name"]


def test_every_variable_a_query_names_is_defined(board):
    defined = {v["name"] for v in board["templating"]["list"]}
    named = {name for query in dashboard.queries(board) for name in VARIABLE.findall(query)}
    assert named - GRAFANA_VARIABLES <= defined
    assert {"namespace", "pipeline", "model"} <= named


def test_per_pipeline_and_per_step_panels_are_there(board):
    """What the issue asks of it: per pipeline and per step, request rate, p50/p99, queue time, replicas,
    errors."""
    titles = {p["title"]: p for p in board["panels"]}
    for title in (
        "Requests per second",
        "p50 request latency",
        "p99 request latency",
        "Queue time per request",
        "Replicas",
        "Failed requests per second",
    ):
        assert title in titles
    for title in ("Requests per second", "p99 request latency", "Queue time per request"):
        expr = titles[title]["targets"][0]["expr"]
        assert "namespace, pipeline, model" in expr, title  # per step, each under its pipeline
    assert 'quantile="0.5"' in titles["p50 request latency"]["targets"][0]["expr"]
    assert 'quantile="0.99"' in titles["p99 request latency"]["targets"][0]["expr"]


def test_metric_names_are_read_from_the_queries():
    expr = dashboard.per_request("nv_inference_queue_duration_us")
    assert dashboard.metric_names(expr) == {"nv_inference_queue_duration_us", "nv_inference_request_success"}
    assert dashboard.metric_names('label_values(up{job=~"a|b"}, pod)') == {"up"}
    assert dashboard.metric_names('max by (a, b) (x:y{c="sum(z)"}) > bool 0 or on (d) w') == {"x:y", "w"}


def test_the_summary_setting_the_panels_name_is_accepted_by_the_spec():
    """The p50/p99 panels tell users to add SUMMARY_LATENCIES to spec.server.args: the operator takes it."""
    from tritonpipeline.spec import parse_pipeline

    doc = example("fanout")
    doc["spec"]["server"]["args"] = [SUMMARY_LATENCIES]
    assert parse_pipeline(doc).spec.server.args == [SUMMARY_LATENCIES]


def test_the_chart_ships_the_generated_dashboard_in_its_configmap():
    """The ConfigMap's JSON is the file (the chart reads files/grafana-dashboard.json), which `make
    generate` writes from tools/dashboard.py (tests/unit/test_generated.py checks it is current)."""
    assert json.loads(SHIPPED.read_text()) == dashboard.dashboard()
    template = (CHART / "templates" / "grafana-dashboard.yaml").read_text()
    assert '.Files.Get "files/grafana-dashboard.json"' in template
    values = yaml.safe_load((CHART / "values.yaml").read_text())["dashboard"]
    assert (values["enabled"], values["label"], values["labelValue"]) == (False, "grafana_dashboard", "1")
