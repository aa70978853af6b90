"""kopf handlers: thin entry points. Parsing, rendering, applying and reporting live in reconcile.py
(and the pure spec/compiler/kube modules it calls)."""

from __future__ import annotations

import asyncio
import collections
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import kopf

from . import health, metrics
from .kube.client import Kube
from .kube.meta import PIPELINE_LABEL
from .reconcile import (
    MANAGED,
    api_client,
    forget,
    mirror_deployment,
    mirror_pods,
    namespace_of,
    owner_of,
    reconcile,
    restore_child,
    resync_loop,
)
from .settings import GROUP, PLURAL, VERSION, Settings


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """All operator settings in one place."""
    config = Settings.from_env()
    # API calls run in threads (the official client is synchronous); more than 8 buys nothing on the
    # CPU-bound path and costs memory (measured with `make bench-controlplane`)
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(8, thread_name_prefix="kube"))
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.INFO  # only explicit kopf.info/kopf.warn become Events
    settings.execution.max_workers = 32
    settings.watching.server_timeout = config.watch_timeout_seconds
    settings.networking.request_timeout = 60
    memo.settings = config
    memo.kopf_settings = settings  # for the pipeline loggers of the resync loop
    memo.kube = Kube(api_client(), config.field_manager)
    memo.statuses = {}  # (namespace, name) -> the status we last wrote: we are its only writer
    memo.locks = collections.defaultdict(asyncio.Lock)  # status writes, per pipeline
    memo.reconciling = collections.defaultdict(asyncio.Lock)  # reconciles, per pipeline
    memo.owners = {}  # (namespace, name) -> (uid, generation) as last reconciled
    memo.optional = {}  # (namespace, name) -> optional children (api, kind, name) this process rendered
    memo.applied = {}  # (namespace, name) -> what its last reconcile saw of each child (reconcile.changes)
    metrics.watch_pipelines(lambda: list(memo.statuses.values()))
    if config.metrics_url:
        try:
            memo.metrics_server = await health.serve(config.metrics_url, _health(memo))
        except OSError as exc:
            raise kopf.PermanentError(f"cannot serve /metrics at {config.metrics_url}: {exc}") from None
    scope = ", ".join(config.namespaces) if config.namespaces else "all namespaces"
    served = f"; /metrics and /readyz at {config.metrics_url}" if config.metrics_url else ""
    logger.info(f"tritonpipeline operator: watching {scope}; init image {config.assembler_image}{served}")


def _health(memo: kopf.Memo) -> health.WatchHealth:
    """The watch streams' health, made by whichever of start-up and login comes first."""
    if "health" not in memo:
        memo.health = health.WatchHealth(Settings.from_env().watch_stale_seconds)
    return memo.health


@kopf.on.probe(id="watch")
async def watch_alive(memo: kopf.Memo, **_: Any) -> str:
    """Liveness (kopf's /healthz answers 500 when this raises): every watch stream reconnects."""
    problems = _health(memo).problems()
    if problems:
        raise kopf.PermanentError("; ".join(problems))
    return "ok"


@kopf.on.cleanup()
async def stop_metrics(memo: kopf.Memo, **_: Any) -> None:
    server = memo.get("metrics_server")
    if server is not None:
        await server.cleanup()


@kopf.on.login()
async def login(memo: kopf.Memo, **kwargs: Any) -> kopf.AiohttpSession:
    """kopf's own client, with at most 16 connections (its default is unlimited: a burst of 200
    pipelines opened ~130 TLS connections and +90 MB of buffers, measured with `make bench-controlplane`),
    traced for the watch health, API errors and watch restarts (health.py)."""
    info = kopf.login_via_client(memo=memo, **kwargs)
    if info is None:
        raise kopf.LoginError("no Kubernetes credentials found (in-cluster or KUBECONFIG)")
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=16, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        trace_configs=[health.trace_config(_health(memo))],
    )
    return kopf.AiohttpSession(
        server=info.server, aiohttp_session=session, default_namespace=info.default_namespace
    )


@kopf.on.create(GROUP, VERSION, PLURAL)
async def on_create(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    await reconcile(body, memo, logger, "Created")


@kopf.on.update(GROUP, VERSION, PLURAL)
async def on_update(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    await reconcile(body, memo, logger, "Updated")


@kopf.on.resume(GROUP, VERSION, PLURAL)
async def on_resume(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    await reconcile(body, memo, logger, None)


@kopf.on.startup()
async def start_resync(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    memo.resync = asyncio.create_task(resync_loop(memo, logger))


@kopf.on.cleanup()
async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    task = memo.get("resync")
    if task is not None:
        task.cancel()


def _deleted(type: str, **_: Any) -> bool:
    return type == "DELETED"


@kopf.on.event(GROUP, VERSION, PLURAL, when=_deleted)
async def on_delete(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A deleted pipeline leaves the operator's memory (and the pipelines gauge)."""
    forget(memo, namespace_of(body), body.metadata.name)


@kopf.on.event("", "v1", "configmaps", labels=MANAGED, when=_deleted)
@kopf.on.event("", "v1", "services", labels=MANAGED, when=_deleted)
@kopf.on.event("autoscaling", "v2", "horizontalpodautoscalers", labels=MANAGED, when=_deleted)
async def child_changed(body: kopf.Body, type: str, memo: kopf.Memo, **_: Any) -> None:
    """A deleted child is recreated at once from its pipeline's spec."""
    owner = owner_of(body)
    if type == "DELETED" and owner is not None:
        await restore_child(memo, body, owner)


@kopf.on.event("", "v1", "pods", labels=MANAGED)
async def pod_changed(body: kopf.Body, type: str, memo: kopf.Memo, **_: Any) -> None:
    """A Triton pod changed (an init container failed, an image pull is stuck...): Ready says why."""
    name = (body.metadata.labels or {}).get(PIPELINE_LABEL)
    if name and type != "DELETED":
        await mirror_pods(memo, namespace_of(body), name)


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
async def deployment_changed(body: kopf.Body, type: str, memo: kopf.Memo, **_: Any) -> None:
    """Mirror the Deployment's replica counts into its TritonPipeline's status and Ready condition;
    recreate it if it was deleted."""
    owner = owner_of(body)
    if owner is None:
        return
    if type == "DELETED":
        await restore_child(memo, body, owner)
        return
    await mirror_deployment(body, memo, owner)
