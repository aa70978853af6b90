"""The Grafana dashboard the chart ships, against real parts: its JSON checked by the TypeScript compiler
against Grafana's own published types (harness/grafana_schema.py, pinned in tools/grafana-schema/), and
every metric name its panels and the chart's alerts read exported by a real tritonserver or the operator.
The structure and the rest: tests/unit/test_dashboard.py."""

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
from prometheus_client.parser import text_string_to_metric_families

from harness import grafana_schema
from harness.helm import Helm, by_kind
from helpers import ROOT, compile_to_serve, example
from support.dashboard import SUMMARY_LATENCIES

GPU_PAGE = ROOT / "bench" / "results" / "gpu-metrics.prom"


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
