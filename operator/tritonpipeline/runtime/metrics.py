"""The operator's own Prometheus metrics (official client library): every definition is here.

Served with /readyz by `serve` (an aiohttp app on the operator's event loop, started by
`tritonpipeline run --metrics URL`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

PREFIX = "tritonpipeline_operator"
OUTCOMES = ("created", "updated", "unchanged", "waiting", "invalid", "error")

RECONCILES = Counter(
    f"{PREFIX}_reconciles",
    "Reconciles of TritonPipelines by outcome: created, updated, unchanged, waiting (nothing changed, "
    "pods not all ready), invalid (spec refused), error (the apply failed; retried)",
    ["outcome"],
)
RECONCILE_SECONDS = Histogram(
    f"{PREFIX}_reconcile_duration_seconds",
    "Seconds one reconcile of a TritonPipeline took (parse, compile, apply, status)",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ADMISSION_SECONDS = Histogram(
    f"{PREFIX}_admission_duration_seconds",
    "Seconds the operator's handler took to answer one admission review of a TritonPipeline, by webhook "
    "(validate: the spec's verdict; review: the access review) and the pipeline's namespace; refusals "
    "included. The API server's own time and the decoding of the review before the handler are not",
    ["webhook", "namespace"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
API_ERRORS = Counter(
    f"{PREFIX}_api_errors",
    "Failed Kubernetes API calls, kopf's and the operator's, by HTTP status code (`connection` when no "
    "answer came back); 404 includes the normal lookups of objects that do not exist",
    ["code"],
)
WATCH_RESTARTS = Counter(
    f"{PREFIX}_watch_restarts",
    "Watch streams re-opened after the first, by resource (every server timeout, disconnect or error)",
    ["resource"],
)
ACTIVE = Gauge(
    f"{PREFIX}_active",
    "1 on the replica that reconciles (the oldest live one, see High availability), 0 on a standby "
    "(it serves the admission webhook only)",
)
ACTIVE.set(1)
LOOP_LAST_PASS = Gauge(
    f"{PREFIX}_loop_last_pass_timestamp_seconds",
    "When each of the operator's loops last completed a pass (Unix time), by loop: resync, status-poll, "
    "discovery, leadership, webhook-certificate; no series before its first pass. Liveness fails when a "
    "loop has completed none for three of its periods plus TRITONPIPELINE_LOOP_STALE_MARGIN_SECONDS. A "
    "standby replica makes no resync, status-poll or discovery passes",
    ["loop"],
)
LOOP_FAILURES = Counter(
    f"{PREFIX}_loop_failures",
    "Failed passes of the operator's loops, by loop (each one logged, and tried again with backoff)",
    ["loop"],
)
for _outcome in OUTCOMES:  # every outcome is a series from the start (rate() sees the first one)
    RECONCILES.labels(_outcome)


@contextmanager
def answering(webhook: str, doc: Mapping[str, Any] | None) -> Iterator[None]:
    """Observe ADMISSION_SECONDS for the review of `doc` by `webhook` while the block runs."""
    namespace = str(((doc or {}).get("metadata") or {}).get("namespace") or "")
    started = time.monotonic()
    try:
        yield
    finally:
        ADMISSION_SECONDS.labels(webhook, namespace).observe(time.monotonic() - started)


def api_error(code: int | str) -> None:
    API_ERRORS.labels(str(code) if code else "connection").inc()


class PipelinesCollector(Collector):
    """`tritonpipeline_operator_pipelines{ready}`: the watched pipelines by their Ready condition, read
    at scrape time from the statuses the operator last wrote."""

    def __init__(self, statuses: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self.statuses = statuses

    def collect(self) -> Iterable[GaugeMetricFamily]:
        counts = {"True": 0, "False": 0, "Unknown": 0}
        for status in self.statuses():
            counts[_ready(status)] += 1
        family = GaugeMetricFamily(
            f"{PREFIX}_pipelines",
            "Watched TritonPipelines by the status of their Ready condition: True, False or Unknown",
            labels=["ready"],
        )
        for state, n in counts.items():
            family.add_metric([state], n)
        yield family


PIPELINE_LABELS = ["pipeline_namespace", "pipeline"]


def _ready(status: Mapping[str, Any]) -> str:
    """The status of a pipeline's Ready condition: True, False or Unknown (also when it has none yet)."""
    ready: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    state = ready.get("status", "Unknown")
    return state if state in ("True", "False") else "Unknown"


class PipelineCollector(Collector):
    """Per pipeline, read at scrape time from the status the operator last wrote:
    `tritonpipeline_operator_pipeline_ready`, `..._pipeline_replicas` and `..._pipeline_ready_replicas`,
    labelled `pipeline_namespace` and `pipeline` (not `namespace`: a scrape gives that label the
    operator pod's namespace)."""

    def __init__(self, statuses: Callable[[], Mapping[tuple[str, str], Mapping[str, Any]]]) -> None:
        self.statuses = statuses

    def collect(self) -> Iterable[GaugeMetricFamily]:
        ready = GaugeMetricFamily(
            f"{PREFIX}_pipeline_ready",
            "1 when the TritonPipeline's Ready condition is True, 0 when it is False or Unknown (or not "
            "written yet), by pipeline_namespace and pipeline; only the active replica reports pipelines",
            labels=PIPELINE_LABELS,
        )
        replicas = GaugeMetricFamily(
            f"{PREFIX}_pipeline_replicas",
            "The pods of the TritonPipeline's Deployment (status.replicas), by pipeline_namespace and "
            "pipeline; no series before the operator has read the Deployment's status",
            labels=PIPELINE_LABELS,
        )
        ready_replicas = GaugeMetricFamily(
            f"{PREFIX}_pipeline_ready_replicas",
            "The ready pods of the TritonPipeline's Deployment (status.readyReplicas), by "
            "pipeline_namespace and pipeline; no series before the operator has read the Deployment's "
            "status",
            labels=PIPELINE_LABELS,
        )
        for (namespace, name), status in sorted(self.statuses().items()):
            labels = [namespace, name]
            ready.add_metric(labels, 1 if _ready(status) == "True" else 0)
            if isinstance(status.get("replicas"), int):
                replicas.add_metric(labels, status["replicas"])
            if isinstance(status.get("readyReplicas"), int):
                ready_replicas.add_metric(labels, status["readyReplicas"])
        yield from (ready, replicas, ready_replicas)


class LoopsCollector(Collector):
    """`tritonpipeline_operator_loop_stalled{loop}`: 1 for a loop past its bound (what liveness fails on,
    loops.py), 0 otherwise, judged at scrape time."""

    def __init__(self, stalled: Callable[[], Mapping[str, bool]]) -> None:
        self.stalled = stalled

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            f"{PREFIX}_loop_stalled",
            "1 when one of the operator's loops (the `loop` label, as in "
            "tritonpipeline_operator_loop_last_pass_timestamp_seconds) has completed no pass for three of "
            "its periods plus TRITONPIPELINE_LOOP_STALE_MARGIN_SECONDS (liveness then fails and the pod is "
            "restarted), 0 otherwise; a loop a standby replica does not run reads 0",
            labels=["loop"],
        )
        for name, stalled in sorted(self.stalled().items()):
            family.add_metric([name], 1 if stalled else 0)
        yield family


class NotOwnedCollector(Collector):
    """`tritonpipeline_operator_objects_not_owned{kind}`: the objects with a name a pipeline's child would
    have that another holds (left as they are, render/ownership.py), as the pipelines' last reconciles found
    them, by kind."""

    def __init__(self, taken: Callable[[], Iterable[Iterable[tuple[str, str, str]]]]) -> None:
        self.taken = taken

    def collect(self) -> Iterable[GaugeMetricFamily]:
        counts: dict[str, int] = {}
        for refs in self.taken():
            for _, kind, _ in refs:
                counts[kind] = counts.get(kind, 0) + 1
        family = GaugeMetricFamily(
            f"{PREFIX}_objects_not_owned",
            "Objects with the name of a pipeline's child that are not the pipeline's (another's Service, "
            "another pipeline's headless Service...), left as they are and reported in the pipeline's "
            "ObjectsOwned condition, by kind; 0 in a healthy cluster",
            labels=["kind"],
        )
        for kind, n in sorted(counts.items()):
            family.add_metric([kind], n)
        yield family


_pipelines: list[Collector] = []
_loops: list[Collector] = []


def watch_pipelines(
    statuses: Callable[[], Mapping[tuple[str, str], Mapping[str, Any]]],
    taken: Callable[[], Iterable[Iterable[tuple[str, str, str]]]] = list,
) -> None:
    """Register the gauges read from the pipelines' statuses (by namespace and name) and from what their
    children's names hold (a second call replaces the first)."""
    while _pipelines:
        REGISTRY.unregister(_pipelines.pop())
    _pipelines.extend(
        [
            PipelinesCollector(lambda: statuses().values()),
            PipelineCollector(statuses),
            NotOwnedCollector(taken),
        ]
    )
    for collector in _pipelines:
        REGISTRY.register(collector)


def watch_loops(stalled: Callable[[], Mapping[str, bool]]) -> None:
    """Register the gauge of the loops past their bound (a second call replaces the first)."""
    while _loops:
        REGISTRY.unregister(_loops.pop())
    _loops.append(LoopsCollector(stalled))
    REGISTRY.register(_loops[0])


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric of this process, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
