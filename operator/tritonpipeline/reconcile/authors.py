"""May a pipeline's author reach what it reaches: the admission webhook's review, and each reconcile's
check of its record (what is reviewed and how the record reads: render/reach.py).

At admission (`stamp`, a mutating webhook: kopf's handler in handlers.py) the API server hands the
webhook the request's user. For each item of a new pipeline, or of a spec change, that no admin list
allows, the webhook asks the API server whether that user may do it themselves (a SubjectAccessReview):
a denial refuses the write with the field path; otherwise the items are recorded on the pipeline, signed.
An update that leaves the spec as it is keeps the record it had; one by another user than the operator
reviews its author for what the record lacks (so that `kubectl annotate` by someone allowed reviews a
pipeline stored before). Each reconcile (`check`) renders the items again and goes on only where each is
listed or recorded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf

from ..errors import Problem, SpecError
from ..kube.api_client import Kube, KubeError, path
from ..render import reach as rc
from ..render import routing_objects as rt
from ..render.manifests import Children
from ..render.webhook_configuration import REVIEW_HANDLER_ID
from ..runtime import admission
from ..runtime import log_events as events
from ..runtime.state import OperatorState
from ..settings import Settings
from ..spec import TritonPipeline
from .gateway import lookup as lookup_gateway

log = logging.getLogger(__name__)

HANDLER_ID = REVIEW_HANDLER_ID  # kopf's handler id: the mutating webhook's path
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
WHOAMI_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
KEY_BYTES = 32
KEY_FIELD = "key"  # the data key of the review key's Secret
# How long the API server's "allowed" to a SubjectAccessReview is kept for the same user and item (the
# kube-apiserver keeps its webhook authorizer's for 5 minutes): a tenant's storm of dry runs asks once,
# not six times a request from the threads the reconciles' API calls ran in (issue 54: that moved
# another tenant's admission p50 19x at one large dry run a second). A denial is not kept: a user
# granted the access a moment later is admitted at once.
ANSWER_SECONDS = 10.0
ANSWERS_KEPT = 4096  # answers kept at most (each a few hundred bytes); the oldest go first


# ------------------------------------------------------------------------------------------- key


def review_key(kube: Kube, settings: Settings) -> bytes:
    """The key that signs review records: from the Secret `settings.review_key_store`, written there
    by the first replica that finds it empty (or missing: created), else a key of this process's own.
    Raises KubeError where the Secret cannot be read or written."""
    if not settings.review_key_store:
        return secrets.token_bytes(KEY_BYTES)
    namespace, name = settings.review_key_store.split("/", 1)
    while True:
        secret = kube.get("v1", "Secret", namespace, name)
        data = (secret or {}).get("data") or {}
        if data.get(KEY_FIELD):
            return base64.b64decode(data[KEY_FIELD])
        key = secrets.token_bytes(KEY_BYTES)
        encoded = {KEY_FIELD: base64.b64encode(key).decode("ascii")}
        try:
            if secret is None:
                doc = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": namespace},
                }
                kube.request(
                    "POST", path("v1", "Secret", namespace), body={**doc, "data": encoded}, retries=0
                )
            else:  # the chart's empty Secret: a PUT with its resourceVersion, so that one replica wins
                body = {**secret, "data": encoded}
                kube.request("PUT", path("v1", "Secret", namespace, name), body=body, retries=0)
        except KubeError as exc:
            if exc.status != 409:
                raise
            continue  # another replica wrote first: read its key
        return key


def whoami(kube: Kube) -> str | None:
    """The operator's own user name (a SelfSubjectReview), or None where the API server cannot say."""
    try:
        found = kube.request(
            "POST",
            WHOAMI_PATH,
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            retries=1,
        )
    except KubeError:
        return None
    return ((found.get("status") or {}).get("userInfo") or {}).get("username")


async def ensure_key(state: OperatorState) -> bytes:
    """The review key, read once a process (a KubeError is the caller's: the webhook's request fails,
    the reconcile is retried), and the operator's own user name with it."""
    reviews = state.reviews
    async with reviews.lock:
        if reviews.key is None:
            key = await asyncio.to_thread(review_key, state.kube, state.settings)
            reviews.self_user = await asyncio.to_thread(whoami, state.kube)
            reviews.key = key
    return reviews.key


# ------------------------------------------------------------------------------------------ items


async def items_of(state: OperatorState, doc: Mapping[str, Any]) -> list[rc.Reach] | None:
    """The items a pipeline reaches, rendered as the reconcile renders it (with the implementation of
    its Gateway read where the spec leaves it out); None for a spec that does not compile (the
    validating webhook refuses it, the reconcile reports it). Found in a compile worker, shared fairly
    between namespaces (runtime/compiling.py), which sends back only the items: the event loop that
    answers the other tenants' reviews never walks a large pipeline's children."""
    from .pipeline import compiled  # the reconcile's own compile and cache (it imports this module)

    try:
        items = await state.workers.reach_items(doc, state.settings)
        if items is not None:
            return items
        tp, _, children, _ = await compiled(state, doc)  # its Gateway is to be read: rendered here
    except SpecError:
        return None
    return await _reach(state, tp, children, doc)


async def _reach(
    state: OperatorState, tp: TritonPipeline, children: Children, doc: Mapping[str, Any]
) -> list[rc.Reach]:
    """The items of the pipeline as rendered, and (marked optional) those of the ScaledObject an `auto`
    autoscaling engine may get instead of its HPA: reviewed and recorded when allowed, so that the
    reconcile may choose KEDA (reconcile/engine.py), never refused."""
    if rt.needs_gateway_lookup(tp):  # as the reconcile does (reconcile/pipeline.py)
        gateway = await lookup_gateway(state.kube, tp, state.settings)
        if gateway.implementation is not None:
            routing = rt.routing_children(tp, state.settings, gateway.implementation)
            children = replace(children, routing=routing)
    spec = doc.get("spec") or {}
    required = rc.reach(tp, children, state.settings, spec)
    return [*required, *rc.optional_reach(tp, state.settings, spec, required)]


def user_may(kube: Kube, user: Mapping[str, Any], item: rc.Reach) -> bool:
    """Whether the API server says `user` (an admission request's userInfo) may do `item`."""
    spec: dict[str, Any] = {"resourceAttributes": item.attributes()}
    for field in ("uid", "groups", "extra"):
        if user.get(field):
            spec[field] = user[field]
    spec["user"] = user.get("username", "")
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    found = kube.request("POST", SAR_PATH, body=body)
    return bool((found.get("status") or {}).get("allowed"))


async def allowed(
    state: OperatorState, namespace: str, user: Mapping[str, Any], items: list[rc.Reach]
) -> list[bool]:
    """Whether `user` may do each of `items` (`user_may`): from an allowed answer kept for ANSWER_SECONDS or
    one being asked for another review, else asked in the review threads in `namespace`'s turn
    (runtime/admission.py: shared fairly between namespaces, apart from the reconciles' API calls)."""
    answers, now = state.reviews.answers, time.monotonic()
    who = json.dumps([user.get(f) for f in ("username", "uid", "groups", "extra")], sort_keys=True)
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[bool]] = []
    asked: dict[tuple[str, str], tuple[rc.Reach, asyncio.Future[bool]]] = {}
    for item in items:
        key = (who, json.dumps(item.attributes(), sort_keys=True))
        kept = answers.get(key)
        if kept is None or kept[0] < now:
            kept = answers[key] = (now + ANSWER_SECONDS, loop.create_future())
            asked[key] = (item, kept[1])
        futures.append(kept[1])
    if asked:
        await _ask(state, namespace, user, asked)
    return list(await asyncio.gather(*futures))


async def _ask(
    state: OperatorState,
    namespace: str,
    user: Mapping[str, Any],
    asked: dict[tuple[str, str], tuple[rc.Reach, asyncio.Future[bool]]],
) -> None:
    """Ask the API server about `asked` and settle their futures: an allowed answer stays kept, a
    denial or an error (given to every review waiting for it) does not."""
    answers = state.reviews.answers
    try:
        async with admission.TURNS.of(namespace):
            found = await asyncio.get_running_loop().run_in_executor(
                admission.REVIEWS, lambda: [user_may(state.kube, user, item) for item, _ in asked.values()]
            )
    except BaseException as exc:
        for key, (_, future) in asked.items():
            answers.pop(key, None)  # cancelled: another review that waits for it fails as on an error
            future.set_exception(exc if isinstance(exc, Exception) else KubeError(0, "review cancelled"))
            future.exception()  # retrieved: a future no other review awaits logs nothing
        raise
    for (key, (_, future)), ok in zip(asked.items(), found, strict=True):
        if not ok:
            answers.pop(key, None)
        future.set_result(ok)
    while len(answers) > ANSWERS_KEPT:  # the oldest first (a dict keeps the order they were asked in)
        del answers[next(iter(answers))]


# -------------------------------------------------------------------------------------- admission


async def stamp(
    state: OperatorState,
    operation: str,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    user: Mapping[str, Any],
    patch: kopf.Patch,
    dryrun: bool = False,
) -> None:
    """The mutating webhook: review the author of a new pipeline or a spec change, refuse what they may
    not reach (kopf.AdmissionError, HTTP 403, every item with its field path), and record the rest on
    the object (`rc.RECORD_ANNOTATION`); any other update keeps the record it had. A dry run is
    reviewed alike, but its record is not written: the API server would apply the patch to the whole
    object for nothing stored (issue 54: a storm of 0.9 MB dry runs, patched once a second each)."""
    if dryrun:
        patch = kopf.Patch()
    if (
        not state.settings.review_authors
        or new is None
        or operation not in ("CREATE", "UPDATE")
        or (new.get("metadata") or {}).get("deletionTimestamp")
    ):
        return
    key = await ensure_key(state)
    meta = new.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    before = rc.record_of(old) if old is not None else None
    kept = rc.recorded(key, namespace, name, before)
    spec_changed = old is None or old.get("spec") != new.get("spec")
    username = str(user.get("username", ""))
    if not spec_changed and (username == state.reviews.self_user or state.reviews.self_user is None):
        _write(patch, new, before)  # the operator's own writes (kopf's annotations) review nobody
        return
    named = new if name else {**new, "metadata": {**meta, "name": f"{meta.get('generateName') or ''}x"}}
    items = await items_of(state, named)  # a generated name comes after admission: one like it for now
    if items is None:  # refused by the validating webhook (a spec change), or reported by the reconcile
        _write(patch, new, None if spec_changed else before)
        return
    current = {i.key for i in items if not i.listed}
    wanted = [i for i in items if not i.listed and i.key not in kept]
    if not wanted:  # all on the record already (reviewed for someone allowed): nothing to ask
        _write(patch, new, before)
        return
    if not name:  # generateName: the name the record is bound to comes after admission
        if any(not i.optional for i in wanted):
            raise kopf.AdmissionError(f"metadata.name: {rc.NO_NAME}", code=422)
        _write(patch, new, before)  # optional items alone: not reviewed (the HPA serves meanwhile)
        return
    answers = await allowed(state, namespace, user, wanted)
    denied = [i for i, ok in zip(wanted, answers, strict=True) if not ok]
    refused = [i for i in denied if not i.optional]  # an optional item is recorded only when allowed
    if refused and spec_changed:
        problems = [
            Problem(i.field, rc.DENIED.format(user=username, words=i.words(), allow=rc.allowed_by(i)))
            for i in refused
        ]
        events.ACCESS_DENIED.log(log, user=username, namespace=namespace, name=name, count=len(refused))
        raise kopf.AdmissionError("\n".join(map(str, problems)), code=403)
    if refused:  # an annotation by someone who may not reach it all: the record stays as it was
        _write(patch, new, before)
        return
    recorded = current - {i.key for i in denied}
    _write(patch, new, rc.record(key, namespace, name, username, sorted(recorded)))


def _write(patch: kopf.Patch, new: Mapping[str, Any], value: str | None) -> None:
    """Set the record annotation to `value` (None: none), whatever the request wrote there."""
    if rc.record_of(new) != value:
        patch.metadata.annotations[rc.RECORD_ANNOTATION] = value


# -------------------------------------------------------------------------------------- reconcile


async def check(
    state: OperatorState, body: Mapping[str, Any], tp: TritonPipeline, children: Children
) -> None:
    """Raise SpecError naming each item the pipeline reaches once rendered as `children` (with its
    Gateway's implementation) that neither an admin list allows nor its record holds (with
    review_authors on; nothing to check otherwise)."""
    if not state.settings.review_authors:
        return
    items = rc.reach(tp, children, state.settings, body.get("spec") or {})
    problems = await _unreviewed(state, body, tp, items)
    if problems:
        raise SpecError(problems)


async def unreviewed(
    state: OperatorState, body: Mapping[str, Any], tp: TritonPipeline, objects: list[dict[str, Any]]
) -> list[Problem]:
    """The refusals `check` would make of `objects` (the ScaledObject an `auto` engine may get): none
    with review_authors off."""
    if not state.settings.review_authors:
        return []
    items = rc.reach_objects(tp, objects, state.settings, body.get("spec") or {})
    return await _unreviewed(state, body, tp, items)


async def _unreviewed(
    state: OperatorState, body: Mapping[str, Any], tp: TritonPipeline, items: list[rc.Reach]
) -> list[Problem]:
    pending = [i for i in items if not i.listed]
    if not pending:
        return []
    namespace, name = tp.metadata.namespace or "default", tp.name
    key = await ensure_key(state)
    allowed = rc.recorded(key, namespace, name, rc.record_of(body))
    return rc.unreviewed(pending, allowed, webhook=state.reviews.webhook_on)
