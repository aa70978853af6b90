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
  on an H200 (bench/results/gpu-metrics.prom), as this machine has no GPU."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dashboard  # tools/ (conftest.py puts it on the path)
import numpy as np
import pytest
import reference
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import grafana_schema
from harness.helm import CHART, Helm, by_kind
from helpers import ROOT, compile_to_serve, example

SHIPPED = CHART / "files" / "grafana-dashboard.json"
GPU_PAGE = ROOT / "bench" / "results" / "gpu-metrics.prom"
SUMMARY_LATENCIES = "--metrics-config=summary_latencies=true"  # what the p50/p99 panels tell users to set
VARIABLE = re.compile(r"\$\{?(\w+)")
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "1"}  # built in ($1: label_replace's)


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    return json.loads(SHIPPED.read_text())


# --- Grafana's schema -----------------------------------------------------------------------------


@pytest.mark.grafana
def test_the_dashboard_conforms_to_grafanas_schema(board):
    if reason := grafana_schema.missing():
        pytest.skip(reason)
    assert grafana_schema.check(board) == []


@pytest.mark.grafana
def test_the_schema_check_refuses_what_grafanas_types_refuse(board):
    """The check is not vacuous: a misspelt panel field, an enum value Grafana does not know and a query
    without its refId are each refused with the field."""
    if reason := grafana_schema.missing():
        pytest.skip(reason)

    def refused(change: Any) -> str:
        bad = json.loads(json.dumps(board))
        change(next(p for p in bad["panels"] if p["type"] == "timeseries"))
        return "\n".join(grafana_schema.check(bad))

    assert "'\"colour\"' does not exist" in refused(lambda panel: panel.update(colour="red"))
    grid = refused(lambda panel: panel["options"]["legend"].update(displayMode="grid"))
    assert "'\"grid\"' is not assignable" in grid
    assert "Property 'refId' is missing" in refused(lambda panel: panel["targets"][0].pop("refId"))


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


# --- the metric names, against what really exports them -------------------------------------------


def operator_metric_names() -> set[str]:
    """The operator's metrics as /metrics exposes them (a histogram's and a counter's series too)."""
    names = set()
    for metric in reference.operator_metrics():
        names.add(metric.name)
        if metric.kind == "histogram":
            names |= {f"{metric.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    assert all(f"`{m.name}`" in page for m in reference.operator_metrics())  # the generated list
    return names


def page_metric_names(text: str) -> dict[str, set[str]]:
    """Each series name of a /metrics page and the label names its samples carry."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for name in {family.name, sample.name}:
                found.setdefault(name, set()).update(sample.labels)
    return found


@pytest.fixture(scope="module")
def triton_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The /metrics page of a real tritonserver serving examples/fanout.yaml with Triton's latency
    summaries on (SUMMARY_LATENCIES), after a few requests (a summary's quantiles appear with the
    first one)."""
    import tritonclient.http as httpclient

    from tritonpipeline.local.repository import write_repository
    from tritonpipeline.local.tritonserver import LocalTriton
    from tritonpipeline.spec import parse_pipeline

    doc = example("fanout")
    tp = parse_pipeline(doc)
    work = tmp_path_factory.mktemp("triton-page")
    repo = write_repository(compile_to_serve(doc), work / "repo", Path(tp.spec.model_repository.uri))
    server = LocalTriton(
        repo, log_file=work / "triton.log", extra_args=["--exit-timeout-secs=5", SUMMARY_LATENCIES]
    )
    try:
        server.start()
        server.wait_ready(timeout=120)
        client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        for _ in range(5):
            image = httpclient.InferInput("IMAGE", [1, 4], "FP32")
            image.set_data_from_numpy(x)
            client.infer("vision", [image])
        with urllib.request.urlopen(server.metrics_url, timeout=10) as answer:
            yield answer.read().decode()
    finally:
        server.stop(timeout=15)


def test_the_summary_setting_the_panels_name_is_accepted_by_the_spec():
    """The p50/p99 panels tell users to add SUMMARY_LATENCIES to spec.server.args: the operator takes it."""
    from tritonpipeline.spec import parse_pipeline

    doc = example("fanout")
    doc["spec"]["server"]["args"] = [SUMMARY_LATENCIES]
    assert parse_pipeline(doc).spec.server.args == [SUMMARY_LATENCIES]


def check_names(queries: list[str], exported: dict[str, set[str]]) -> list[str]:
    """The metric names the queries read that nothing exports, as `name (in: query)` lines."""
    return [
        f"{name} (in: {query})"
        for query in queries
        for name in sorted(dashboard.metric_names(query))
        if name not in exported
    ]


@pytest.mark.tritonserver
def test_every_metric_the_dashboard_reads_is_exported(board, triton_page):
    triton = page_metric_names(triton_page)
    gpu = {k: v for k, v in page_metric_names(GPU_PAGE.read_text()).items() if k.startswith("nv_gpu_")}
    operator = {name: set() for name in operator_metric_names()}
    queries = list(dashboard.queries(board))
    assert check_names(queries, {**triton, **gpu, **operator}) == []
    # the labels the queries group or select by are on those series
    for name in (
        "nv_inference_request_success",
        "nv_inference_queue_duration_us",
        "nv_inference_request_summary_us",
    ):
        assert "model" in triton[name], name
    assert "reason" in triton["nv_inference_request_failure"]
    quantiles = set(re.findall(r'nv_inference_request_summary_us\{[^}]*quantile="([0-9.]+)"', triton_page))
    assert {"0.5", "0.99"} <= quantiles, quantiles


@pytest.mark.tritonserver
@pytest.mark.helm
def test_every_metric_the_alerts_read_is_exported(helm_binary, tmp_path, triton_page):
    values = ROOT / "tests" / "alert_rules" / "values.yaml"
    (rule,) = by_kind(Helm(helm_binary, tmp_path / "helm").template("rel", "ops", [values]), "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    exported = {**page_metric_names(triton_page), **{n: set() for n in operator_metric_names()}}
    assert len(exprs) == 4 and check_names(exprs, exported) == []


def test_the_chart_ships_the_generated_dashboard_in_its_configmap():
    """The ConfigMap's JSON is the file (the chart reads files/grafana-dashboard.json), which `make
    generate` writes from tools/dashboard.py (tests/unit/test_generated.py checks it is current)."""
    assert json.loads(SHIPPED.read_text()) == dashboard.dashboard()
    template = (CHART / "templates" / "grafana-dashboard.yaml").read_text()
    assert '.Files.Get "files/grafana-dashboard.json"' in template
    values = yaml.safe_load((CHART / "values.yaml").read_text())["dashboard"]
    assert (values["enabled"], values["label"], values["labelValue"]) == (False, "grafana_dashboard", "1")
