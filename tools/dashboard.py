"""The Grafana dashboard the chart ships (charts/triton-pipeline/files/grafana-dashboard.json, written by
`make generate`; templates/grafana-dashboard.yaml puts it in a ConfigMap for Grafana's sidecar): per
pipeline and per step, the request rate, p50/p99 and average latency, queue and compute time, replicas,
pending requests and errors.

Triton counts per model: a pipeline's steps are its models, and each pipeline of a TritonPipeline is an
ensemble named like it, whose series are the whole pipeline's. A series' TritonPipeline is read from its
`pod` label (a Deployment's pods are named PIPELINE-HASH-SUFFIX), as render/autoscaling_objects.py selects a
pipeline's pods, so the dashboard works with any Prometheus that scrapes the pods with Kubernetes
discovery (the chart's ServiceMonitor, metrics.serviceMonitor). Replicas and readiness are the operator's
own gauges (tritonpipeline_operator_pipeline_*; metrics.operatorServiceMonitor).

tests/component/test_dashboard.py checks the file against Grafana's schema (the @grafana/schema
package's types, tools/grafana-schema/) and every metric name against a real tritonserver's /metrics page
and the operator's metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

UID = "tritonpipeline-pipelines"
TITLE = "TritonPipeline: pipelines and steps"
SCHEMA_VERSION = 41  # the dashboard JSON model's version Grafana 12 writes
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# a Deployment's pod PIPELINE-HASH-SUFFIX -> its pipeline (render/autoscaling_objects.py: pod_matchers)
POD_OF_PIPELINE = "[a-z0-9]+-[a-z0-9]+"
PIPELINE_PODS = f'namespace=~"$namespace",pod=~"($pipeline)-{POD_OF_PIPELINE}"'
STEPS = f'{PIPELINE_PODS},model=~"$model"'
OPERATOR = 'pipeline_namespace=~"$namespace",pipeline=~"$pipeline"'
BY_STEP = "namespace, pipeline, model"
LEGEND_STEP = "{{namespace}}/{{pipeline}} {{model}}"
LEGEND_PIPELINE = "{{namespace}}/{{pipeline}}"
WIDTH, HEIGHT = 12, 8


def series(metric: str, selector: str = STEPS) -> str:
    return f"{metric}{{{selector}}}"


def operator_gauge(metric: str) -> str:
    """One of the operator's per-pipeline gauges (only the active replica reports them; max drops a
    replica's last series after a handover)."""
    return f"max by (pipeline_namespace, pipeline) ({series(metric, OPERATOR)})"


def pipeline_of_pod(expr: str) -> str:
    """`expr` with a `pipeline` label read from its `pod` label."""
    return f'label_replace({expr}, "pipeline", "$1", "pod", "(.+)-{POD_OF_PIPELINE}")'


def per_step_rate(metric: str, selector: str = STEPS, by: str = BY_STEP) -> str:
    return f"sum by ({by}) ({pipeline_of_pod(f'rate({metric}{{{selector}}}[$__rate_interval])')})"


def per_request(metric: str | tuple[str, ...]) -> str:
    """Microseconds per successful request, per step: a counter's rate over the request rate (no value
    without requests: 0/0)."""
    metrics = (metric,) if isinstance(metric, str) else metric
    total = " + ".join(per_step_rate(m) for m in metrics)
    return f"({total}) / {per_step_rate('nv_inference_request_success')}"


def quantile(q: str) -> str:
    """The slowest pod's quantile of Triton's request-duration summary, per step."""
    series = f'nv_inference_request_summary_us{{{STEPS},quantile="{q}"}}'
    return f"max by ({BY_STEP}) ({pipeline_of_pod(series)})"


def target(expr: str, legend: str, ref: str = "A") -> dict[str, Any]:
    return {"refId": ref, "datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "range": True}


def timeseries(
    title: str, description: str, unit: str, targets: list[dict[str, Any]], **custom: Any
) -> dict[str, Any]:
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "custom": {"drawStyle": "line", "fillOpacity": 10, **custom},
            },
            "overrides": [],
        },
        "options": {
            "legend": {
                "calcs": ["mean", "max"],
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def ready_stat() -> dict[str, Any]:
    return {
        "type": "stat",
        "title": "Ready",
        "description": (
            "Each pipeline's Ready condition (tritonpipeline_operator_pipeline_ready, from the operator: "
            "metrics.operatorServiceMonitor). Not Ready for prometheusRule.pipelineNotReady.for fires "
            "TritonPipelineNotReady."
        ),
        "datasource": DATASOURCE,
        "fieldConfig": {
            "defaults": {
                "mappings": [
                    {
                        "type": "value",
                        "options": {
                            "0": {"text": "Not Ready", "color": "red", "index": 0},
                            "1": {"text": "Ready", "color": "green", "index": 1},
                        },
                    }
                ],
                "thresholds": {
                    "mode": "absolute",
                    "steps": [{"color": "red", "value": None}, {"color": "green", "value": 1}],
                },
            },
            "overrides": [],
        },
        "options": {
            "colorMode": "background",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "value_and_name",
            "percentChangeColorMode": "standard",
            "showPercentChange": False,
            "wideLayout": True,
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        },
        "targets": [
            target(
                operator_gauge("tritonpipeline_operator_pipeline_ready"),
                "{{pipeline_namespace}}/{{pipeline}}",
            )
        ],
    }


def row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


def panels() -> list[dict[str, Any]]:
    """The panels in order, rows included (positions and ids are set by `dashboard`)."""
    return [
        row("Pipelines"),
        ready_stat(),
        timeseries(
            "Replicas",
            "Each pipeline's pods and ready pods (tritonpipeline_operator_pipeline_replicas and "
            "_ready_replicas: the Deployment's status as the operator last read it).",
            "short",
            [
                target(
                    operator_gauge("tritonpipeline_operator_pipeline_replicas"),
                    "{{pipeline_namespace}}/{{pipeline}} pods",
                ),
                target(
                    operator_gauge("tritonpipeline_operator_pipeline_ready_replicas"),
                    "{{pipeline_namespace}}/{{pipeline}} ready",
                    "B",
                ),
            ],
        ),
        timeseries(
            "GPU utilization",
            "Average utilization of the GPUs of each pipeline's pods (nv_gpu_utilization, which Triton "
            "reports as a fraction; no series on CPU-only pods). The gpuUtilization autoscaling metric.",
            "percent",
            [
                target(
                    "100 * avg by (namespace, pipeline) "
                    f"({pipeline_of_pod(series('nv_gpu_utilization', PIPELINE_PODS))})",
                    LEGEND_PIPELINE,
                )
            ],
        ),
        row("Traffic (per step: each Triton model; an ensemble named like a pipeline is the whole pipeline)"),
        timeseries(
            "Requests per second",
            "Successful inference requests per second, per model (nv_inference_request_success).",
            "reqps",
            [target(per_step_rate("nv_inference_request_success"), LEGEND_STEP)],
        ),
        timeseries(
            "Failed requests per second",
            "Failed inference requests per second, per model and reason (nv_inference_request_failure: "
            "REJECTED, CANCELED, BACKEND, OTHER).",
            "reqps",
            [
                target(
                    per_step_rate("nv_inference_request_failure", by=f"{BY_STEP}, reason"),
                    f"{LEGEND_STEP} {{{{reason}}}}",
                )
            ],
        ),
        timeseries(
            "Pending requests",
            "Requests received and not yet executing, per model (nv_inference_pending_request_count, "
            "summed over the pipeline's pods). The pendingRequests autoscaling metric.",
            "short",
            [
                target(
                    f"sum by ({BY_STEP}) ({pipeline_of_pod(series('nv_inference_pending_request_count'))})",
                    LEGEND_STEP,
                )
            ],
        ),
        row("Latency (per step)"),
        timeseries(
            "p50 request latency",
            "Median time a request to the model took, from Triton's request summary "
            "(nv_inference_request_summary_us), the slowest pod's. Triton exports it only with "
            "`--metrics-config=summary_latencies=true` in spec.server.args.",
            "µs",
            [target(quantile("0.5"), LEGEND_STEP)],
        ),
        timeseries(
            "p99 request latency",
            "99th percentile of the time a request to the model took, from Triton's request summary "
            "(nv_inference_request_summary_us), the slowest pod's. Triton exports it only with "
            "`--metrics-config=summary_latencies=true` in spec.server.args.",
            "µs",
            [target(quantile("0.99"), LEGEND_STEP)],
        ),
        timeseries(
            "Average request latency",
            "Average time a successful request to the model took, end to end in the server "
            "(nv_inference_request_duration_us / nv_inference_request_success): always exported.",
            "µs",
            [target(per_request("nv_inference_request_duration_us"), LEGEND_STEP)],
        ),
        timeseries(
            "Queue time per request",
            "Average time a request waited in the model's queue (nv_inference_queue_duration_us / "
            "nv_inference_request_success): the queueTime autoscaling metric. Above "
            "prometheusRule.queueTime.thresholdMicroseconds it fires TritonPipelineQueueTimeHigh.",
            "µs",
            [target(per_request("nv_inference_queue_duration_us"), LEGEND_STEP)],
        ),
        timeseries(
            "Compute time per request",
            "Average time the model computed a request: input, inference and output "
            "(nv_inference_compute_*_duration_us / nv_inference_request_success).",
            "µs",
            [
                target(
                    per_request(
                        (
                            "nv_inference_compute_input_duration_us",
                            "nv_inference_compute_infer_duration_us",
                            "nv_inference_compute_output_duration_us",
                        )
                    ),
                    LEGEND_STEP,
                )
            ],
        ),
    ]


def query_variable(name: str, label: str, query: str, regex: str = "") -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "regex": regex,
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".+",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": 0,
        "skipUrlSync": False,
    }


def variables() -> list[dict[str, Any]]:
    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "regex": "",
            "options": [],
            "hide": 0,
            "refresh": 1,
            "skipUrlSync": False,
        },
        query_variable("namespace", "Namespace", "label_values(nv_inference_request_success, namespace)"),
        query_variable(
            "pipeline",
            "Pipeline",
            'label_values(nv_inference_request_success{namespace=~"$namespace"}, pod)',
            f"/^(.+)-{POD_OF_PIPELINE}$/",
        ),
        query_variable(
            "model",
            "Step (model)",
            f"label_values({series('nv_inference_request_success', PIPELINE_PODS)}, model)",
        ),
    ]


def laid_out(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ids from 1 and grid positions: a row spans the width; panels fill two columns under it."""
    out, y, column = [], 0, 0
    for number, item in enumerate(items, 1):
        panel = {"id": number, **item}
        if item["type"] == "row":
            y += HEIGHT if column else 0
            panel["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            y, column = y + 1, 0
        else:
            panel["gridPos"] = {"h": HEIGHT, "w": WIDTH, "x": column * WIDTH, "y": y}
            y, column = (y + HEIGHT, 0) if column else (y, 1)
        out.append(panel)
    return out


def dashboard() -> dict[str, Any]:
    return {
        "uid": UID,
        "title": TITLE,
        "description": (
            "Per TritonPipeline and per step (Triton model): request rate, p50/p99 and average latency, "
            "queue and compute time, replicas, pending requests and errors. Shipped by the triton-pipeline "
            "chart (dashboard.enabled); see docs/how-to/operate.md."
        ),
        "tags": ["triton", "tritonpipeline", "inference"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {"list": []},
        "templating": {"list": variables()},
        "panels": laid_out(panels()),
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


# -- what the queries read

PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
RANGE = re.compile(r"\[[^\]]*\]")
BRACES = re.compile(r"\{[^}]*\}")
NAME = re.compile(r"(?<![\w$.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
LABEL_VALUES = re.compile(r"^label_values\((?P<query>.*),\s*\w+\)$")  # Grafana's variable query


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (function names, keywords, label names and the
    strings' contents left out). Enough for the queries here: no `__name__` matchers."""
    if values := LABEL_VALUES.match(expr.strip()):
        expr = values["query"]
    text = STRING.sub('""', expr)
    text = GROUPING.sub(" ", BRACES.sub(" ", RANGE.sub(" ", text)))
    return {m for m in NAME.findall(text) if m not in PROMQL_WORDS and not m.isdigit()}


def queries(board: dict[str, Any]) -> Iterator[str]:
    """Every PromQL query of a dashboard: its panels' targets and its query variables'."""
    for panel in board["panels"]:
        for item in panel.get("targets", []):
            yield item["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["query"]["query"]
