"""The status users act on: every poll period, each pipeline's Ready pods' Triton metrics (per step queue
and compute time, the bottleneck, each branch's traffic) and its autoscaler's replicas go into its
status. A poll never fails a reconcile: what cannot be read is left out, with one warning when a
pipeline's scrapes start failing."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import aiohttp
import kopf

from ..errors import SpecError
from ..kube.api_client import KubeError, transient_error
from ..render import autoscaling_objects
from ..render import triton_metrics as tm
from ..render.meta import METRICS_PORT
from ..runtime import log_events as events
from ..runtime.loops import STATUS_POLL, supervise
from ..runtime.state import OperatorState
from ..spec import TritonPipeline
from ..triton.addresses import url_host
from .pipeline import parsed
from .resync import watched_pipelines
from .status_writer import list_pods, previous_condition, write_status

SCRAPE_TIMEOUT_SECONDS = 3.0
# what a pod's metrics page may take: Triton's for hundreds of models on eight GPUs is well under 1 MiB.
# A tenant controls what its pods serve (its image, Python custom metrics): a 19.7 MB page took the
# operator to its memory limit and stalled every tenant's admission while it was parsed (issue 54)
MAX_SCRAPE_BYTES = 4 * 1024 * 1024
SCRAPE_CHUNK_BYTES = 64 * 1024


def ready_pod_ips(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Pod name -> pod IP of the pods that are Ready (the ones Triton answers on)."""
    ready = {}
    for pod in pods:
        status = pod.get("status") or {}
        conditions = status.get("conditions") or []
        ok = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        if ok and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            ready[pod["metadata"]["name"]] = status["podIP"]
    return ready


async def read_capped(response: aiohttp.ClientResponse, most: int) -> bytes:
    """The response's body, or ValueError as soon as it is longer than `most` bytes (read no further)."""
    too_long = ValueError(f"the page is larger than {most // (1024 * 1024)} MiB; not read")
    if (response.content_length or 0) > most:
        raise too_long
    body = bytearray()
    async for chunk in response.content.iter_chunked(SCRAPE_CHUNK_BYTES):
        body += chunk
        if len(body) > most:
            raise too_long
    return bytes(body)


async def scrape(session: aiohttp.ClientSession, ip: str) -> tm.Scrape:
    """One pod's Triton counters (raises OSError, aiohttp.ClientError, TimeoutError or ValueError): at
    most MAX_SCRAPE_BYTES read, parsed on a thread (not on the loop the webhook and handlers answer on)."""
    async with session.get(f"http://{url_host(ip)}:{METRICS_PORT}/metrics") as response:
        response.raise_for_status()
        body = await read_capped(response, MAX_SCRAPE_BYTES)
        at = time.monotonic()
    return await asyncio.to_thread(tm.read_scrape, body.decode("utf-8", "replace"), at)


async def scrape_pods(state: OperatorState, key: tuple[str, str], ips: dict[str, str]) -> dict[str, str]:
    """Scrape every pod in `ips` and keep the scrapes in its memory (pods gone are dropped; a pod that
    failed keeps its previous scrape). Returns the pods that failed, with why."""
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        results = await asyncio.gather(*(scrape(session, ip) for ip in ips.values()), return_exceptions=True)
    memory = state.memory(key)
    previous = memory.scrapes
    current: dict[str, tm.Scrape] = {}
    failed: dict[str, str] = {}
    for pod, result in zip(ips, results, strict=True):
        if isinstance(result, tm.Scrape):
            current[pod] = result
        elif isinstance(result, Exception):
            failed[pod] = f"{type(result).__name__}: {result}".rstrip(": ")
            if pod in previous:  # kept: the next good scrape measures from it
                current[pod] = previous[pod]
        else:
            raise result
    memory.scrapes = current
    return failed


async def poll_pipeline(state: OperatorState, cr: dict[str, Any], log: Any) -> None:
    """Read one pipeline's pod metrics and autoscaler into its status."""
    namespace, name = cr["metadata"]["namespace"], cr["metadata"]["name"]
    key = (namespace, name)
    body = kopf.Body(cast(kopf.RawBody, cr))
    valid = previous_condition(state, namespace, name, body, "SpecValid") or {}
    if valid.get("status") == "False":
        return  # its status already says why
    try:  # the reconcile's parse where kept, else parsed off the event loop: nothing is compiled
        tp = await parsed(state, body)
    except SpecError:
        return
    new: dict[str, Any] = {}
    try:
        pods = await list_pods(state, namespace, name, indexed=True)
        ips = ready_pod_ips(pods)
        memory = state.memory(key)
        before = dict(memory.scrapes)
        failed = await scrape_pods(state, key, ips)
        now = memory.scrapes
        fresh = {p: (None if p in failed else now.get(p)) for p in ips}
        pairs = [(before[p], s) for p, s in fresh.items() if s is not None and p in before]
        work = tm.pipeline_work(pairs) if pairs else None
        new.update(tm.steps_status(tp, work))
        # the branches as the last reconcile wrote them (status.graph: what the pods serve)
        graph = (memory.status or cr.get("status") or {}).get("graph") or {}
        last = {p: now[p] for p in ips if p in now}  # a pod that failed counts with its last scrape
        new["branchTraffic"] = tm.branch_traffic_status(graph.get("conditions"), last, work)
        new["openSequences"] = tm.open_sequences_status(tp, fresh)
        _report_failures(state, key, failed, log)
        if (
            not autoscaling_objects.may_choose_keda(tp) or memory.engine is not None
        ):  # `auto`: once reconciled
            new["autoscaler"] = await _autoscaler(state, tp, namespace, memory.engine)
    except KubeError as exc:
        if transient_error(exc):  # no answer: the pass fails and is tried again (runtime/loops.py)
            raise
        events.STATUS_POLL_UNREADABLE.log(log, error=exc)
        return
    await write_status(state, namespace, name, new)


async def _autoscaler(
    state: OperatorState, tp: TritonPipeline, namespace: str, engine: str | None
) -> dict[str, Any] | None:
    """status.autoscaler from the HPA of the engine the last reconcile chose (`engine`: ours, or KEDA's)."""
    chosen = autoscaling_objects.engine_of(tp) if engine is None else cast(autoscaling_objects.Engine, engine)
    name = autoscaling_objects.hpa_name(tp, chosen)
    if name is None:
        return None
    known = state.children.get("HorizontalPodAutoscaler", namespace, name)
    if known is not None:  # ours: its watch shows it (KEDA's HPA is not ours, nor watched)
        return tm.autoscaler_status(tp, known.body, chosen)
    hpa = await asyncio.to_thread(
        state.kube.get, "autoscaling/v2", "HorizontalPodAutoscaler", namespace, name
    )
    return tm.autoscaler_status(tp, hpa, chosen)


def _report_failures(state: OperatorState, key: tuple[str, str], failed: dict[str, str], log: Any) -> None:
    """One warning when a pipeline's scrapes start failing, one info line when they work again."""
    memory = state.memory(key)
    if failed and not memory.scrape_failing:
        memory.scrape_failing = True
        pod, error = next(iter(failed.items()))
        more = events.MORE_PODS.format(count=len(failed) - 1) if len(failed) > 1 else ""
        events.METRICS_UNREADABLE.log(log, pod=pod, port=METRICS_PORT, error=error, more=more)
    elif not failed and memory.scrape_failing:
        memory.scrape_failing = False
        events.METRICS_READABLE_AGAIN.log(log)


async def poll_pass(state: OperatorState, logger: kopf.Logger) -> None:
    """Poll every pipeline; one whose poll raises is reported and the others go on, but no answer from
    the API server fails the pass."""
    for cr in await watched_pipelines(state, logger, STATUS_POLL):
        if cr["metadata"].get("deletionTimestamp"):
            continue
        try:
            await poll_pipeline(state, cr, state.logger_for(cr))
        except Exception as exc:
            if transient_error(exc):
                raise
            events.STATUS_POLL_FAILED.log(state.logger_for(cr), error_type=type(exc).__name__, error=exc)


async def poll_loop(state: OperatorState, logger: kopf.Logger) -> None:
    """Every status poll period, a poll pass on the active replica (supervised like the resync loop)."""
    loop = state.loops.add(STATUS_POLL, state.settings.status_poll_seconds, active_only=True)
    await supervise(state.loops, loop, lambda: poll_pass(state, logger), logger, wait_first=True)
