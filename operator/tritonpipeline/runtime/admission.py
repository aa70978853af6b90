"""The validating admission: the whole compiler at `kubectl apply` (kopf's handler, `admit`).

`review` says which requests are checked: a CREATE, or an UPDATE that changes the spec. The verdict is
the same parse + compile + cluster checks as `tritonpipeline validate` and the operator
(render/checks.py `validate`), computed in the compile workers; a CREATE is refused too where its
objects' names are another's (`names_taken`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from ..errors import Problem
from ..kube.api_client import Kube, KubeError
from ..render import ownership
from ..render.checks import Verdict
from ..settings import API_VERSION, KIND, Settings
from . import log_events as events
from .compiling import Workers
from .discovery import Discovery
from .fairness import FairShare

log = logging.getLogger(__name__)


def review(operation: str, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> bool:
    """Whether an admission request is one the webhook checks: a CREATE, or an UPDATE that changes the spec
    of an object not being deleted. Other updates (labels, kopf's annotations, finalizers) pass, so an
    object stored before the webhook existed keeps working and reports its problems in status."""
    if new is None or operation not in ("CREATE", "UPDATE"):
        return False
    if (new.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return not (operation == "UPDATE" and old is not None and old.get("spec") == new.get("spec"))


def looked_up(name: str, keda: bool = True) -> list[ownership.Ref]:
    """The objects whose names a new pipeline named `name` checks at admission: every name it could
    render (render/ownership.py `generated_names`) but its Secret (the operator may only create
    Secrets) and, without `keda` (settings.use_keda: the operator makes none, and the chart grants it
    none), its ScaledObject."""
    return [
        (api, kind, taken)
        for api, kind, taken in ownership.generated_names(name)
        if kind != "Secret" and (keda or kind != "ScaledObject")
    ]


async def served(discovery: Discovery, kube: Kube, refs: list[ownership.Ref]) -> list[ownership.Ref]:
    """Those of `refs` whose kind the cluster serves (runtime/discovery.py: asked once a discovery
    period), so no lookup goes to a kind nobody installed; one whose API cannot be read is kept."""
    kept = []
    for ref in refs:
        try:
            if not await discovery.served(kube, ref[0], ref[1]):
                continue
        except KubeError:
            pass
        kept.append(ref)
    return kept


def names_taken(kube: Kube, doc: Mapping[str, Any], lookups: list[ownership.Ref]) -> list[Problem]:
    """A new pipeline's object names that are already another's, where the webhook can know it: another
    pipeline of the namespace that makes an object of the same kind and name (render/ownership.py
    `collisions`), an existing object of `lookups` (`looked_up`) that the pipeline could not take. What
    cannot be read (403) is not checked. The reads run LOOKUPS_AT_ONCE at a time: while the API server
    is saturated each waits in its queue, and one after another they made an admission wait for all."""
    meta = doc.get("metadata") or {}
    name, namespace, uid = str(meta.get("name", "")), meta.get("namespace") or "default", meta.get("uid", "")
    problems = []
    candidates = ownership.could_collide(name)

    def read(ref: ownership.Ref) -> dict[str, Any] | None:
        try:
            return kube.get(ref[0], ref[1], namespace, ref[2])
        except KubeError:
            return None  # not served by this cluster, or not ours to read

    with ThreadPoolExecutor(LOOKUPS_AT_ONCE, thread_name_prefix="lookup") as pool:
        found = pool.map(read, lookups)
        try:
            if candidates is None:
                listed = kube.list(API_VERSION, KIND, namespace, "", True)
                others = [str(p["metadata"]["name"]) for p in listed]
            else:  # a GET of each pipeline that could collide, not a list of them all (their managedFields)
                others = [other for other in candidates if kube.get(API_VERSION, KIND, namespace, other)]
        except KubeError:
            others = []
        live_objects = list(found)
    for other, kind, taken in ownership.collisions(name, others):
        message = ownership.NAME_COLLISION.format(other=other, kind=kind, name=taken)
        problems.append(Problem("metadata.name", message))
    for (_, kind, taken), live in zip(lookups, live_objects, strict=True):
        if live is None or ownership.holder(live, name, str(uid)).writable:
            continue
        message = ownership.NAME_TAKEN_AT_ADMISSION.format(
            kind=kind,
            name=taken,
            owner=ownership.describe_owner(live),
            annotation=ownership.ADOPT_ANNOTATION,
            pipeline=name,
        )
        problems.append(Problem("metadata.name", message))
    return problems


# A review's API reads run in threads of their own: the reconciles' API calls (the default executor) may
# queue for minutes while many large pipelines resync, and the API server waits at most 10 s for an
# answer. Its compile runs in the compile workers (runtime/compiling.py).
REVIEW_THREADS = 2
LOOKUPS_AT_ONCE = 4  # a review's reads of the names it would take, in threads of its own (`names_taken`)
REVIEWS = ThreadPoolExecutor(REVIEW_THREADS, thread_name_prefix="review")
# the review threads shared fairly between namespaces, one at a time for each: a tenant's storm of
# (dry-run) creates leaves a thread free for another namespace's review, which waits for none of the
# storm's reads (issue 54: three large specs stalled another tenant's admission 3.2 s at a time; with
# both threads open to one namespace, a storm at one large dry run a second still held them)
TURNS = FairShare(REVIEW_THREADS, 1)
IN_PROCESS = Workers()  # compiles in threads of this process: callers that pass no workers (tests)


async def admit(
    operation: str,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    warnings: list[str],
    settings: Settings | None,
    kube: Kube | None = None,
    workers: Workers = IN_PROCESS,
    discovery: Discovery | None = None,
) -> None:
    """kopf's validating handler: raises kopf.AdmissionError (HTTP 422) with every problem, adds warnings.
    The verdict comes from `workers` (its cache, or a compile in a worker process). A CREATE whose
    objects' names are another's is refused too (`names_taken`, with `kube`; only the kinds `discovery`
    says the cluster serves, where given). An unexpected error allows
    the request with a warning: the operator still checks it afterwards."""
    if not review(operation, new, old):
        return
    assert new is not None
    try:
        loop = asyncio.get_running_loop()
        result = await workers.verdict(new, settings)
        if result.allowed and operation == "CREATE" and kube is not None:
            meta = new.get("metadata") or {}
            lookups = looked_up(str(meta.get("name", "")), settings is None or settings.use_keda)
            if discovery is not None:
                lookups = await served(discovery, kube, lookups)
            async with TURNS.of(str(meta.get("namespace", ""))):
                taken = await loop.run_in_executor(REVIEWS, names_taken, kube, new, lookups)
            result = Verdict(taken, result.warnings) if taken else result
    except Exception as exc:
        events.WEBHOOK_REVIEW_FAILED.log(log)
        warnings.append(f"not checked at admission ({type(exc).__name__}); the operator reports in status")
        return
    warnings.extend(map(str, result.warnings))
    if not result.allowed:
        raise kopf.AdmissionError(result.message(), code=422)
