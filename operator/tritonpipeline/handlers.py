"""kopf handlers: thin entry points. Parsing, rendering, applying and reporting live in reconcile/
(and the pure spec/compiler/kube modules it calls). `memo` is the OperatorState (state.py) that
`tritonpipeline run` hands kopf; each resource's handlers get a shallow copy sharing its stores."""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import kopf

from .reconcile import authors
from .reconcile.discovery_loop import discovery_loop
from .reconcile.leadership import leadership_loop
from .reconcile.live import poll_loop
from .reconcile.pipeline import reconcile
from .reconcile.refs import namespace_of, owner_of
from .reconcile.resync import reconcile_owner, repair_drift, restore_admin_secret, restore_child, resync_loop
from .reconcile.status_writer import mirror_pods
from .reconcile.upgrade import finished_rolling
from .render import webhook_configuration
from .render.meta import MANAGED_BY, PIPELINE_LABEL
from .runtime import admission, health, metrics, webhook_server
from .runtime import log_events as events
from .runtime.diffbase import DigestDiffBaseStorage, spec_changed
from .runtime.state import API_THREADS, OperatorState, operator_state
from .settings import GROUP, PLURAL, VERSION

# The children whose events the operator handles. kopf's `labels=` filters on the client, after listing
# and watching every object of the kind in the cluster (300 unrelated 500 KB ConfigMaps: 694 MB peak
# RSS, tests/component/test_operator_memory.py); start() has the apiserver select the operator's own children
# instead (a labelSelector on kopf's list and watch requests).
CONFIGMAPS = ("", "v1", "configmaps")
SERVICES = ("", "v1", "services")
AUTOSCALERS = ("autoscaling", "v2", "horizontalpodautoscalers")
BUDGETS = ("policy", "v1", "poddisruptionbudgets")
NETWORK_POLICIES = ("networking.k8s.io", "v1", "networkpolicies")
PODS = ("", "v1", "pods")
DEPLOYMENTS = ("apps", "v1", "deployments")
CHILDREN = (CONFIGMAPS, SERVICES, AUTOSCALERS, BUDGETS, NETWORK_POLICIES, PODS, DEPLOYMENTS)
WATCHED = ((GROUP, VERSION, PLURAL), *CHILDREN)  # every resource a handler below watches
API_CONNECTIONS = 16  # kopf's connections for requests, besides those its watch streams hold


def watch_streams(namespaces: tuple[str, ...]) -> int:
    """The connections kopf's watch streams hold for good: each watched resource and the peering object
    in each watched namespace (or once, cluster-wide), and its CRD and namespace observers."""
    return max(len(namespaces), 1) * (len(WATCHED) + 1) + 2


CHILD_SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())


def select_children(settings: kopf.OperatorSettings) -> None:
    """kopf's list and watch of each child kind ask the apiserver for the operator's children only."""
    for resource in CHILDREN:
        settings.watching.label_selectors[resource] = CHILD_SELECTOR


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: object, logger: kopf.Logger, **_: Any) -> None:
    """All operator settings in one place; the /metrics server and the resync loop start here."""
    state = operator_state(memo)
    config = state.settings
    executor = ThreadPoolExecutor(API_THREADS, thread_name_prefix="kube")  # API calls (runtime/state.py)
    asyncio.get_running_loop().set_default_executor(executor)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix=GROUP)  # a digest, not a copy
    settings.posting.level = logging.INFO  # only explicit kopf.info/kopf.warn become Events
    settings.execution.max_workers = 32
    settings.watching.server_timeout = config.watch_timeout_seconds
    settings.networking.request_timeout = 60
    select_children(settings)
    state.workers.configure(config)  # the compile worker processes (runtime/compiling.py)
    try:  # the admission webhook (runtime/webhook_server.py) when TRITONPIPELINE_WEBHOOK_LISTEN is set
        registered = functools.partial(state.health.waiting.discard, webhook_server.NOT_REGISTERED)
        settings.admission.server = webhook_server.server(config, state.kube, state.loops, registered)
    except webhook_configuration.WebhookConfigError as exc:
        raise kopf.PermanentError(str(exc)) from None
    state.reviews.webhook_on = isinstance(settings.admission.server, webhook_server.Server)
    if state.reviews.webhook_on:  # not ready until the API server calls the webhooks
        state.health.waiting.add(webhook_server.NOT_REGISTERED)
    if not config.review_authors or not state.reviews.webhook_on:
        why = events.NO_REVIEW if not config.review_authors else events.NO_REVIEW_WEBHOOK
        events.AUTHORS_NOT_REVIEWED.log(logger, why=why)
    state.kopf_settings = settings  # for the pipeline loggers of the resync loop
    metrics.watch_pipelines(
        lambda: (
            {k: m.status for k, m in state.pipelines.items() if m.status is not None} if state.active else {}
        ),
        lambda: [list(m.taken) for m in state.pipelines.values()] if state.active else [],
    )
    metrics.watch_loops(state.loops.stalled)
    if config.metrics_url:
        try:
            state.metrics_server = await health.serve(config.metrics_url, state.health, state.loops)
        except OSError as exc:
            raise kopf.PermanentError(f"cannot serve /metrics at {config.metrics_url}: {exc}") from None
    if config.peering:  # kopf starts paused and resumes when no peer outranks this replica
        settings.peering.lifetime = config.peering_lifetime_seconds
        state.active = False
        state.loops.standby = True
        metrics.ACTIVE.set(0)
        state.leadership = asyncio.create_task(leadership_loop(state, logger))
    state.workers.start()  # last: a start-up that fails above leaves no process behind
    state.resync = asyncio.create_task(resync_loop(state, logger))
    state.discovering = asyncio.create_task(discovery_loop(state, logger))
    if config.status_poll_seconds > 0:
        state.poll = asyncio.create_task(poll_loop(state, logger))
    scope = ", ".join(config.namespaces) if config.namespaces else "all namespaces"
    served = events.STARTED_METRICS.format(url=config.metrics_url) if config.metrics_url else ""
    peers = ""
    if config.peering:
        peers = events.STARTED_PEERING.format(identity=state.identity, peering=config.peering)
    ids = events.STARTED_PLATFORM_IDS if config.platform_ids else ""
    events.OPERATOR_STARTED.log(
        logger, scope=scope, image=config.assembler_image, metrics=served, peering=peers, ids=ids
    )


@kopf.on.cleanup()
async def stop(memo: OperatorState, **_: Any) -> None:
    """Stop what start() started."""
    for task in (memo.resync, memo.poll, memo.leadership, memo.discovering):
        if task is not None:
            task.cancel()
    memo.workers.close()
    if memo.metrics_server is not None:
        await memo.metrics_server.cleanup()


@kopf.on.probe(id="watch")
async def watch_alive(memo: OperatorState, **_: Any) -> str:
    """Liveness (kopf's /healthz answers 500 when this raises): every watch stream reconnects."""
    problems = memo.health.problems()
    if problems:
        raise kopf.PermanentError("; ".join(problems))
    return "ok"


@kopf.on.probe(id="loops")
async def loops_alive(memo: OperatorState, **_: Any) -> str:
    """Liveness: every loop (resync, status poll, discovery, leadership, webhook certificate) completed a
    pass within its bound (runtime/loops.py)."""
    problems = memo.loops.problems()
    if problems:
        raise kopf.PermanentError("; ".join(problems))
    return "ok"


@kopf.on.login()
async def login(memo: OperatorState, **kwargs: Any) -> kopf.AiohttpSession:
    """kopf's own client, with API_CONNECTIONS connections for requests besides its watch streams (its
    default is unlimited: a burst of 200 pipelines opened ~130 TLS connections and +90 MB of buffers,
    measured with `make bench-controlplane`; a limit below the streams leaves requests such as Event
    posts waiting forever), traced for the watch health, API errors and watch restarts (health.py)."""
    info = kopf.login_via_client(memo=memo, **kwargs)
    if info is None:
        raise kopf.LoginError("no Kubernetes credentials found (in-cluster or KUBECONFIG)")
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=API_CONNECTIONS + watch_streams(memo.settings.namespaces), ssl=info.as_ssl_context()
        ),
        headers=info.as_http_headers(),
        trace_configs=[health.trace_config(memo.health)],
    )
    return kopf.AiohttpSession(
        server=info.server, aiohttp_session=session, default_namespace=info.default_namespace
    )


@kopf.on.validate(GROUP, VERSION, PLURAL, id=webhook_configuration.HANDLER_ID)
async def validate(warnings: list[str], memo: OperatorState, **kwargs: Any) -> None:
    """The admission webhook (runtime/admission.py): a CREATE or a spec change with any problem is refused."""
    operation, new, old = kwargs["operation"], kwargs["new"], kwargs["old"]
    with metrics.answering("validate", new):
        await admission.admit(
            operation, new, old, warnings, memo.settings, memo.kube, memo.workers, memo.discovery
        )


@kopf.on.mutate(GROUP, VERSION, PLURAL, id=authors.HANDLER_ID)
async def review_access(warnings: list[str], memo: OperatorState, patch: kopf.Patch, **kwargs: Any) -> None:
    """The access review (reconcile/authors.py, with TRITONPIPELINE_REVIEW_AUTHORS): a new pipeline or a
    spec change whose author may not reach what it asks for is refused; the rest is recorded on it."""
    operation, new, old, user = kwargs["operation"], kwargs["new"], kwargs["old"], kwargs["userinfo"]
    with metrics.answering("review", new):
        await authors.stamp(memo, operation, new, old, user, patch, bool(kwargs.get("dryrun")))


@kopf.on.create(GROUP, VERSION, PLURAL)
async def on_create(body: kopf.Body, memo: OperatorState, logger: kopf.Logger, **_: Any) -> None:
    await reconcile(body, memo, logger, "Created")


@kopf.on.update(GROUP, VERSION, PLURAL)
async def on_update(
    body: kopf.Body, diff: kopf.Diff, memo: OperatorState, logger: kopf.Logger, **_: Any
) -> None:
    # a change of the labels or annotations alone is re-applied as a resync is: no Updated event
    await reconcile(body, memo, logger, "Updated" if spec_changed(diff) else None)


INDEX_WAIT_SECONDS = 10.0  # how long a resume waits for the children's watches to have listed them


@kopf.on.resume(GROUP, VERSION, PLURAL)
async def on_resume(body: kopf.Body, memo: OperatorState, logger: kopf.Logger, **_: Any) -> None:
    """A pipeline found at start-up: reconciled once the watches of its children have listed them (the
    index then tells an unchanged child, which is not sent again), or after INDEX_WAIT_SECONDS."""
    plurals = [plural for _, _, plural in CHILDREN]
    deadline = asyncio.get_running_loop().time() + INDEX_WAIT_SECONDS
    while not memo.health.listed(plurals) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    await reconcile(body, memo, logger, None)


def _deleted(type: str, **_: Any) -> bool:
    return type == "DELETED"


@kopf.on.event(GROUP, VERSION, PLURAL, when=_deleted)
async def on_delete(body: kopf.Body, memo: OperatorState, **_: Any) -> None:
    """A deleted pipeline leaves the operator's memory (and the pipelines gauge)."""
    memo.forget(namespace_of(body), body.metadata.name)


@kopf.on.event(*CONFIGMAPS)
@kopf.on.event(*SERVICES)
@kopf.on.event(*AUTOSCALERS)
@kopf.on.event(*BUDGETS)
@kopf.on.event(*NETWORK_POLICIES)
@kopf.on.event(*PODS)
@kopf.on.event(*DEPLOYMENTS)
async def child_seen(body: kopf.Body, type: str, memo: OperatorState, **_: Any) -> None:
    """Every child as its watch shows it, for the loops to read instead of the API (runtime/children.py);
    one someone else changed is repaired at once."""
    memo.children.observe(body, deleted=type == "DELETED")
    if type == "MODIFIED":
        await repair_drift(memo, body)


@kopf.on.event(*CONFIGMAPS, when=_deleted)
@kopf.on.event(*SERVICES, when=_deleted)
@kopf.on.event(*AUTOSCALERS, when=_deleted)
@kopf.on.event(*BUDGETS, when=_deleted)
@kopf.on.event(*NETWORK_POLICIES, when=_deleted)
async def child_changed(body: kopf.Body, type: str, memo: OperatorState, **_: Any) -> None:
    """A deleted child is recreated at once from its pipeline's spec."""
    owner = owner_of(body)
    if type == "DELETED" and owner is not None:
        await restore_child(memo, body, owner)


@kopf.on.event(*PODS)
async def pod_changed(body: kopf.Body, type: str | None, memo: OperatorState, **_: Any) -> None:
    """A Triton pod changed (an init container failed, an image pull is stuck...): Ready says why; a pod
    waiting for its missing admin-key Secret gets it at once."""
    name = (body.metadata.labels or {}).get(PIPELINE_LABEL)
    if name and type != "DELETED":
        if type is not None:  # None: listed at start-up, where the pipeline's resume writes its status
            await mirror_pods(memo, namespace_of(body), name)
        await restore_admin_secret(memo, body, name)


@kopf.on.event(*DEPLOYMENTS)
async def deployment_changed(body: kopf.Body, type: str | None, memo: OperatorState, **_: Any) -> None:
    """Mirror the Deployment's replica counts into its TritonPipeline's status and Ready condition;
    recreate it if it was deleted."""
    owner = owner_of(body)
    if owner is None:
        return
    if type == "DELETED":
        await restore_child(memo, body, owner)
        return
    if type is None:  # listed at start-up: the pipeline's resume reconcile writes its status
        return
    namespace = namespace_of(body)
    await mirror_pods(memo, namespace, owner["name"])  # as it is now, not as the event said
    for queued_namespace, queued in finished_rolling(memo, namespace, owner["name"], dict(body)):
        await reconcile_owner(memo, queued_namespace, queued)  # the next outdated pipeline rolls
