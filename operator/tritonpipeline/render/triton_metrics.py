"""What the pipeline's pods are doing, for its status (pure): Triton's Prometheus text (`/metrics` on
METRICS_PORT) parsed into per-model totals, two scrapes of a pod turned into the work done between
them, summed over the pipeline's pods and mapped onto the user's steps; and the autoscaler's numbers.

Triton's per-model counters are cumulative since the server started: requests that succeeded, and the
microseconds those requests spent queued and computing (input + infer + output). The average queue and
compute time per request over an interval is the difference of two scrapes divided by the difference in
requests; with no request in the interval there is no average (the field is left out: the apiserver
drops nulls inside status objects), never a zero that looks like a measurement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ..compiler import OPEN_STREAMS_GAUGE, tracks_open_streams
from ..spec import TritonPipeline
from .status_schema import MAX_POD_ENTRIES

REQUESTS = "nv_inference_request_success"
QUEUE = "nv_inference_queue_duration_us"
COMPUTE = (
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
COUNTERS = (REQUESTS, QUEUE, *COMPUTE)


@dataclass(frozen=True)
class ModelTotals:
    """One model's cumulative counters on one server (all its versions together)."""

    requests: float = 0.0
    queue_us: float = 0.0
    compute_us: float = 0.0

    def __add__(self, other: ModelTotals) -> ModelTotals:
        return ModelTotals(
            self.requests + other.requests, self.queue_us + other.queue_us, self.compute_us + other.compute_us
        )

    def __sub__(self, other: ModelTotals) -> ModelTotals:
        return ModelTotals(
            self.requests - other.requests, self.queue_us - other.queue_us, self.compute_us - other.compute_us
        )


@dataclass(frozen=True)
class Scrape:
    """One pod's counters per model, its open-streams gauge (Stream routing; None when absent), and
    when they were read (monotonic seconds)."""

    at: float
    models: Mapping[str, ModelTotals]
    open_streams: int | None = None


@dataclass(frozen=True)
class Work:
    """Work done by one model between two scrapes, summed over pods; `per_second` is the request rate
    (each pod's requests over its own interval, added up)."""

    totals: ModelTotals
    per_second: float


# the series a pod's page may have (Triton's: a few dozen per model and GPU); more is not a Triton page
MAX_SERIES = 50_000
TOO_MANY_SERIES = f"the page has more than {MAX_SERIES} series; not read"


def read_scrape(text: str, at: float) -> Scrape:
    """A /metrics text read at `at`: per model, Triton's cumulative request, queue and compute counters
    (all versions together), and the open-streams gauge. Raises ValueError on text that is not
    Prometheus exposition, or that has more than MAX_SERIES series."""
    found: dict[str, dict[str, float]] = {}
    streams: int | None = None
    series = 0
    for family in text_string_to_metric_families(text):
        series += len(family.samples)
        if series > MAX_SERIES:
            raise ValueError(TOO_MANY_SERIES)
        if family.name == OPEN_STREAMS_GAUGE:
            streams = sum(int(sample.value) for sample in family.samples)
        if family.name not in COUNTERS:
            continue
        for sample in family.samples:  # the parser names a counter's samples NAME_total
            model = sample.labels.get("model")
            if model and sample.name in (family.name, f"{family.name}_total"):
                counters = found.setdefault(model, {})
                counters[family.name] = counters.get(family.name, 0.0) + float(sample.value)
    models = {
        model: ModelTotals(c.get(REQUESTS, 0.0), c.get(QUEUE, 0.0), sum(c.get(name, 0.0) for name in COMPUTE))
        for model, c in found.items()
    }
    return Scrape(at, models, streams)


def difference(previous: Scrape, current: Scrape) -> dict[str, ModelTotals]:
    """Per model, the work between two scrapes of one pod. A counter that went down means the server
    restarted: its current value is the work since then (Prometheus' rate() reads it the same way)."""
    work = {}
    for model, now in current.models.items():
        before = previous.models.get(model, ModelTotals())
        work[model] = now if now.requests < before.requests else now - before
    return work


def pipeline_work(pairs: Iterable[tuple[Scrape, Scrape]]) -> dict[str, Work]:
    """Per model, the work of all pods that were scraped twice, `pairs` being (previous, current)."""
    totals: dict[str, ModelTotals] = {}
    rates: dict[str, float] = {}
    for previous, current in pairs:
        seconds = current.at - previous.at
        if seconds <= 0:
            continue
        for model, done in difference(previous, current).items():
            totals[model] = totals.get(model, ModelTotals()) + done
            rates[model] = rates.get(model, 0.0) + done.requests / seconds
    return {model: Work(totals[model], rates[model]) for model in totals}


def without_nulls(entry: Mapping[str, Any]) -> dict[str, Any]:
    """`entry` without its None values: the apiserver drops nulls inside status objects, so what the
    operator keeps in memory is what it stored."""
    return {key: value for key, value in entry.items() if value is not None}


def _average(total_us: float, requests: float) -> int | None:
    return round(total_us / requests) if requests > 0 else None


def steps_status(tp: TritonPipeline, work: Mapping[str, Work] | None) -> dict[str, Any]:
    """status.steps (per user step: queue and compute µs per request, requests per second) and
    status.bottleneck (`pipeline/step` with the largest queue + compute time per request).

    Only the steps the user wrote: routers and ensembles the compiler adds are not listed. Triton counts
    per model, so steps calling the same model show the same numbers. `work` None: fewer than two scrapes
    yet, no numbers; a step with no request in the interval has rate 0 and no times. A number that is
    not known is left out."""
    steps: list[dict[str, Any]] = []
    slowest: tuple[int, str] | None = None
    for pipeline in tp.spec.pipelines:
        for step in pipeline.steps:
            done = (work or {}).get(step.model)
            requests = done.totals.requests if done else 0.0
            queue = _average(done.totals.queue_us, requests) if done else None
            compute = _average(done.totals.compute_us, requests) if done else None
            entry = {
                "pipeline": pipeline.name,
                "step": step.step_name,
                "model": step.model,
                "queueUs": queue,
                "computeUs": compute,
                "requestsPerSecond": None if work is None else round(done.per_second if done else 0.0, 2),
            }
            steps.append(without_nulls(entry))
            if queue is not None and compute is not None:
                here = (queue + compute, f"{pipeline.name}/{step.step_name}")
                slowest = here if slowest is None or here[0] > slowest[0] else slowest
    return {"steps": steps, "bottleneck": slowest[1] if slowest else None}


def autoscaler_status(
    tp: TritonPipeline, hpa: Mapping[str, Any] | None, engine: str | None = None
) -> dict[str, Any] | None:
    """status.autoscaler from the HPA that scales the pipeline (ours, or KEDA's): its current and desired
    replicas (absent until the HPA controller has reported them), the metric, the target and the engine
    (`hpa` or `keda`, `auto` resolved). None without spec.autoscaling."""
    auto = tp.spec.autoscaling
    if auto is None:
        return None
    status = (hpa or {}).get("status") or {}
    copied = {key: status.get(key) for key in ("currentReplicas", "desiredReplicas")}
    return without_nulls({**copied, "metric": auto.metric, "target": auto.target, "engine": engine})


def open_sequences_status(
    tp: TritonPipeline, pods: Mapping[str, Scrape | None]
) -> list[dict[str, Any]] | None:
    """status.openSequences: per Ready pod, the sequences open on it (the streams the client helper
    registered with the open-streams model, their leases not expired), absent for a pod that could not be
    read. None unless Stream routing. At
    most MAX_POD_ENTRIES pods, the first by name (the CRD's bound)."""
    if not tracks_open_streams(tp):
        return None
    return [
        without_nulls({"pod": pod, "openSequences": scrape.open_streams if scrape is not None else None})
        for pod, scrape in sorted(pods.items())[:MAX_POD_ENTRIES]
    ]
