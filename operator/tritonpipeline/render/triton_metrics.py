"""What the pipeline's pods are doing, for its status (pure): Triton's Prometheus text (`/metrics` on
METRICS_PORT) parsed into per-model totals, two scrapes of a pod turned into the work done between
them, summed over the pipeline's pods and mapped onto the user's steps and branches; and the
autoscaler's numbers.

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

from ..compiler import BRANCH_TAKEN_COUNTER, OPEN_STREAMS_GAUGE, tracks_open_streams
from ..spec import TritonPipeline
from .conditions import fit
from .status_schema import MAX_POD_ENTRIES

REQUESTS = "nv_inference_request_success"
# inferences: one per batch item of each successful request (a request of one item is one); what
# branch traffic counts, since the orchestrator joins the requests taking a branch into one call
INFERENCES = "nv_inference_count"
QUEUE = "nv_inference_queue_duration_us"
COMPUTE = (
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
COUNTERS = (REQUESTS, QUEUE, *COMPUTE, INFERENCES, BRANCH_TAKEN_COUNTER)


@dataclass(frozen=True)
class ModelTotals:
    """One model's cumulative counters on one server (all its versions together)."""

    requests: float = 0.0
    queue_us: float = 0.0
    compute_us: float = 0.0
    inferences: float = 0.0

    def __add__(self, other: ModelTotals) -> ModelTotals:
        return ModelTotals(
            self.requests + other.requests,
            self.queue_us + other.queue_us,
            self.compute_us + other.compute_us,
            self.inferences + other.inferences,
        )

    def __sub__(self, other: ModelTotals) -> ModelTotals:
        return ModelTotals(
            self.requests - other.requests,
            self.queue_us - other.queue_us,
            self.compute_us - other.compute_us,
            self.inferences - other.inferences,
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
    (each pod's requests over its own interval, added up), `inferences_per_second` the inference rate."""

    totals: ModelTotals
    per_second: float
    inferences_per_second: float = 0.0


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
        model: ModelTotals(
            c.get(REQUESTS, 0.0),
            c.get(QUEUE, 0.0),
            sum(c.get(name, 0.0) for name in COMPUTE),
            # a speculative branch's ensemble is never called: the switch counts the rows taking it
            c.get(INFERENCES, 0.0) + c.get(BRANCH_TAKEN_COUNTER, 0.0),
        )
        for model, c in found.items()
    }
    return Scrape(at, models, streams)


def difference(previous: Scrape, current: Scrape) -> dict[str, ModelTotals]:
    """Per model, the work between two scrapes of one pod. A counter that went down means the server
    restarted: its current value is the work since then (Prometheus' rate() reads it the same way)."""
    work = {}
    for model, now in current.models.items():
        before = previous.models.get(model, ModelTotals())
        restarted = now.requests < before.requests or now.inferences < before.inferences
        work[model] = now if restarted else now - before
    return work


def pipeline_work(pairs: Iterable[tuple[Scrape, Scrape]]) -> dict[str, Work]:
    """Per model, the work of all pods that were scraped twice, `pairs` being (previous, current)."""
    totals: dict[str, ModelTotals] = {}
    rates: dict[str, tuple[float, float]] = {}  # (requests, inferences) per second
    for previous, current in pairs:
        seconds = current.at - previous.at
        if seconds <= 0:
            continue
        for model, done in difference(previous, current).items():
            totals[model] = totals.get(model, ModelTotals()) + done
            requests, inferences = rates.get(model, (0.0, 0.0))
            rates[model] = (requests + done.requests / seconds, inferences + done.inferences / seconds)
    return {model: Work(totals[model], *rates[model]) for model in totals}


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


def branch_traffic_status(
    conditions: list[Mapping[str, Any]] | None,
    scrapes: Mapping[str, Scrape] | None,
    work: Mapping[str, Work] | None,
) -> list[dict[str, Any]] | None:
    """status.branchTraffic: per pipeline with conditions (`conditions`: status.graph's, which
    compiler/branch_map.py makes), the inferences its orchestrator (the model named after the pipeline)
    answered and each branch's ensemble took, summed over `scrapes` (the last of each Ready pod: Triton's
    counters since the pod started), the inferences that took no branch where no request can take two,
    and the rates over the last poll interval (`work`). None without conditions.

    Counts are left out while no pod has been read (`scrapes` empty: not a zero that looks like a
    measurement), rates while no pod has been read twice (`work` None). Nothing here ticks on its own:
    idle, every number stays as it was, so the status is written again only when traffic changed one
    (reconcile/status_writer.py writes only what changed)."""
    if not conditions:
        return None

    def inferences(model: str) -> int | None:
        if not scrapes:
            return None
        return round(sum(s.models.get(model, ModelTotals()).inferences for s in scrapes.values()))

    def rate(model: str) -> float | None:
        if work is None:
            return None
        done = work.get(model)
        return round(done.inferences_per_second if done else 0.0, 2)

    traffic = []
    for entry in conditions:
        pipeline = str(entry["pipeline"])
        total = inferences(pipeline)
        branches = [
            without_nulls(
                {
                    "model": b["model"],
                    "condition": fit(str(b["condition"])),
                    "steps": list(b["steps"]),
                    "inferences": inferences(b["model"]),
                    "inferencesPerSecond": rate(b["model"]),
                }
            )
            for b in entry["branches"]
        ]
        taken = sum(int(b.get("inferences", 0)) for b in branches)
        # a branch's counter moves before its pipeline's (the orchestrator answers after its branches)
        untaken = max(total - taken, 0) if total is not None and entry.get("exclusive") else None
        traffic.append(
            without_nulls(
                {
                    "pipeline": pipeline,
                    "inferences": total,
                    "noBranch": untaken,
                    "inferencesPerSecond": rate(pipeline),
                    "branches": branches,
                }
            )
        )
    return traffic


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
