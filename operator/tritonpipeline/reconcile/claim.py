"""Writes to a pipeline's children that reach only the objects the pipeline controls (render/ownership.py
decides whose an object is): an apply names the object's UID, so the API server refuses it when another
object has taken the name; a child that does not exist is created (POST, refused when one of its name
appeared meanwhile); a delete names the UID too."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..kube.api_client import Kube, KubeError, Replaced
from ..render import conditions as st
from ..render import ownership
from ..render.autoscaling_objects import REPLICAS_HANDOVER_MANAGER
from ..render.manifests import Children
from ..runtime.children import ChildIndex
from ..runtime.state import OptionalChildren, Seen
from ..settings import FIELD_MANAGER

LOOKS = 3  # an object deleted or created between the look and the write: look again, this many times


@dataclass(frozen=True)
class Pipeline:
    """The pipeline whose children are written: its name and UID; each child as the last reconcile in this
    process applied it (`seen`, `Kind/name` -> (UID, apply time, fingerprint): a write to it needs no look
    first) and the digest of what it sent (`sent`); the watches' index of the children (`index`), which
    tells whether a child is still as applied; the optional children rendered before (`optional`: by that
    reconcile, else as the live Deployment records them), those a prune may delete."""

    name: str
    uid: str
    namespace: str = ""
    seen: Seen = field(default_factory=dict)
    sent: dict[str, str] = field(default_factory=dict)
    index: ChildIndex | None = None
    new: bool = False  # just created: its children are created, not looked for first
    field_manager: str = FIELD_MANAGER
    optional: OptionalChildren = field(default_factory=set)

    @property
    def known(self) -> dict[str, str]:
        return {ref: seen[0] for ref, seen in self.seen.items()}


def ours(manager: str, field_manager: str) -> bool:
    """Whether a field manager is one of the operator's: its own, or one it applies a part with (the
    admin-key restart, the drain's restart, the replica count's hand-over)."""
    return manager in (field_manager, REPLICAS_HANDOVER_MANAGER) or manager.startswith(f"{field_manager}-")


async def put(
    kube: Kube,
    obj: dict[str, Any],
    pipeline: Pipeline,
    retries: int | None = None,
    field_manager: str | None = None,
) -> dict[str, Any] | ownership.Holder:
    """Server-side apply `obj` (owned by the pipeline) to the object the pipeline controls, or create it
    when none of its name exists. Returns the object as applied, or the Holder of an object of its name
    that is not the pipeline's (nothing written)."""
    ref = ownership.shown(ownership.ref_of(obj))
    uid = pipeline.known.get(ref)
    if uid is not None:
        try:
            return await asyncio.to_thread(kube.apply, obj, retries, field_manager, uid)
        except Replaced:
            pass  # deleted, or another took the name: look
    api, kind, name = ownership.ref_of(obj)
    namespace = obj["metadata"].get("namespace")
    if pipeline.new:  # a new pipeline's children do not exist: create first (an existing one: 409, look)
        created = await _create(kube, obj, retries, field_manager)
        if created is not None:
            return created
    for _ in range(LOOKS):
        live = await asyncio.to_thread(kube.get, api, kind, namespace, name)
        if live is None:
            created = await _create(kube, obj, retries, field_manager)
            if created is None:
                continue  # one of its name appeared meanwhile: whose?
            return created
        holder = ownership.holder(live, pipeline.name, pipeline.uid)
        if not holder.writable:
            return holder
        try:
            if holder.verdict == "adopt":
                return await _adopt(kube, obj, live, retries, field_manager)
            return await asyncio.to_thread(kube.apply, obj, retries, field_manager, live["metadata"]["uid"])
        except Replaced:
            continue
    raise KubeError(409, f"{ref} was deleted or created again {LOOKS} times while being applied")


async def _create(
    kube: Kube, obj: dict[str, Any], retries: int | None, field_manager: str | None
) -> dict[str, Any] | None:
    """Create the object, then apply it, so that its fields are the apply's (a field the operator stops
    applying is then removed) and not the create's; None when an object of its name exists."""
    manager = field_manager or kube.field_manager
    try:
        created = await asyncio.to_thread(kube.create, obj, manager)
    except KubeError as exc:
        if exc.status == 409:
            return None
        raise
    return await _apply_alone(kube, obj, created["metadata"]["uid"], retries, manager)


async def _adopt(
    kube: Kube, obj: dict[str, Any], live: dict[str, Any], retries: int | None, field_manager: str | None
) -> dict[str, Any]:
    """Take over an object its owner annotated for the pipeline (ownership.ADOPT_ANNOTATION): its content
    becomes the rendering (a JSON patch of every part but its metadata: an apply alone would merge the
    two, a Service's ports say), then it is applied as if the operator had created it."""
    uid = live["metadata"]["uid"]
    await asyncio.to_thread(kube.patch_json, obj, uid, ownership.replace_content(obj, live))
    return await _apply_alone(kube, obj, uid, retries, field_manager or kube.field_manager)


async def _apply_alone(
    kube: Kube, obj: dict[str, Any], uid: str, retries: int | None, manager: str
) -> dict[str, Any]:
    """Apply `obj` to the object of `uid` under `manager`, then leave that apply the only owner of the
    object's fields (ownership.managed_fields_reset), so that a field the operator stops applying goes."""
    applied = await asyncio.to_thread(kube.apply, obj, retries, manager, uid)
    managed = (applied.get("metadata") or {}).get("managedFields") or []
    kept = ownership.managed_fields_reset(applied, manager)
    if kept == managed:
        return applied
    operation = {"op": "replace", "path": "/metadata/managedFields", "value": kept}
    return await asyncio.to_thread(kube.patch_json, obj, uid, [operation])


async def remove(kube: Kube, ref: ownership.Ref, namespace: str, pipeline: Pipeline) -> bool:
    """Delete the child `ref` if the pipeline controls it (by UID); False when there was none of the
    pipeline's (another's object of the name is left as it is)."""
    api, kind, name = ref
    uid = pipeline.known.get(ownership.shown(ref))
    if uid is None:
        live = await asyncio.to_thread(kube.get, api, kind, namespace, name)
        if live is None or not ownership.controlled_by(live, pipeline.uid):
            return False
        uid = str(live["metadata"]["uid"])
    return await asyncio.to_thread(kube.delete, api, kind, namespace, name, uid)


@dataclass
class Claims:
    """One reconcile's writes of a pipeline's children: the objects of their names that another holds
    (`taken`: ref -> holder in words) and the children not applied because they depend on one of those
    (`skipped`, render/ownership.py `dependents`)."""

    pipeline: Pipeline
    children: Children
    taken: dict[ownership.Ref, str] = field(default_factory=dict)
    skipped: list[ownership.Ref] = field(default_factory=list)
    # what this reconcile sent, `Kind/name` -> its APPLIED_DIGEST; and what it found as sent before and
    # did not send again (`kept`, `Kind/name` -> what apply.changes records of it)
    sent: dict[str, str] = field(default_factory=dict)
    kept: dict[str, tuple[str, float, int]] = field(default_factory=dict)

    def unchanged(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The child as its watch shows it, when there is nothing to send: it carries the digest of this
        rendering (ownership.APPLIED_DIGEST) and no one changed it since it was applied (its watch shows
        it as this process applied it; after a start, no writer but the operator's own owns its fields).
        None otherwise, or when the index does not know the object (its watch has not listed it yet, or
        the kind is not watched)."""
        p = self.pipeline
        if p.index is None:
            return None
        stamped = ownership.with_digest(obj)
        ref, rendered = ownership.shown(ownership.ref_of(obj)), ownership.applied_digest(stamped)
        _, kind, name = ownership.ref_of(obj)
        live = p.index.get(kind, obj["metadata"].get("namespace") or p.namespace, name)
        if live is None or ownership.applied_digest(live.body) != rendered:
            return None
        seen = p.seen.get(ref)
        if seen is not None:  # this process applied it: as applied, to the watch's eye
            if (live.uid, live.fingerprint) != (seen[0], seen[2]):
                return None
        elif not ownership.controlled_by(live.body, p.uid) or not all(
            ours(m, p.field_manager) for m in live.writers
        ):
            return None
        self.sent[ref] = str(rendered)
        self.kept[ref] = seen if seen is not None else (live.uid, 0.0, live.fingerprint)
        return live.body

    def blocked(self, obj: dict[str, Any]) -> bool:
        """Whether `obj` depends on an object another holds (recorded in `skipped`)."""
        ref = ownership.ref_of(obj)
        if ref in ownership.dependents(self.children, list(self.taken)):
            if ref not in self.skipped:
                self.skipped.append(ref)
            return True
        return False

    async def put(
        self,
        kube: Kube,
        obj: dict[str, Any],
        retries: int | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any] | None:
        """`put` the child unless it is blocked; None when it was not written (taken or blocked)."""
        if self.blocked(obj):
            return None
        kept = self.unchanged(obj)
        if kept is not None:
            return kept
        stamped = ownership.with_digest(obj)
        result = await put(kube, stamped, self.pipeline, retries, field_manager)
        if isinstance(result, ownership.Holder):
            self.taken[ownership.ref_of(obj)] = result.owner
            return None
        self.sent[ownership.shown(ownership.ref_of(obj))] = str(ownership.applied_digest(stamped))
        return result

    def unwritten(self, ctype: str, objects: list[dict[str, Any]]) -> st.Condition | None:
        """A condition of type `ctype` saying which of `objects` were not applied because of a name another
        holds, or None when all were."""
        refs = [ownership.ref_of(o) for o in objects]
        missing = [ref for ref in refs if ref in self.taken or ref in self.skipped]
        if not missing:
            return None
        message = ownership.NOT_WRITTEN.format(objects=", ".join(map(ownership.shown, missing)))
        return st.Condition(ctype, False, ownership.NAME_TAKEN, message)
