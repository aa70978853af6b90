"""Whose an object is (pure): the operator updates and deletes only the objects a pipeline controls.

A pipeline's children have names made from the pipeline's name (render/meta.py,
render/routing_objects.py). In a shared namespace such a name may already be taken: a team's own Service
`c`, another pipeline's headless Service.
The operator then leaves the object exactly as it is and reports it (`NAME_TAKEN`): it never writes over,
takes over or deletes an object whose controller ownerReference is not the pipeline's (by UID). Taking an
existing object is explicit: its owner annotates it with `ADOPT_ANNOTATION` set to the pipeline's name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..settings import FIELD_MANAGER, GROUP, KIND
from . import access, autoscaling_objects
from . import routing_objects as rt
from .conditions import Condition
from .manifests import PDB_API, Children

# on an existing object: the name of the pipeline that may take it over (adopt it as its own child)
ADOPT_ANNOTATION = f"{GROUP}/adopt"
# on the Deployment: the optional children (an autoscaler, routing objects...) applied with it, `Kind/name`
# comma-separated, so that an operator started later prunes the one a spec drops without looking for all
RENDERED_OPTIONAL = f"{GROUP}/optional-children"

# on every child: the digest of what the operator applied (applied_digest), so that an operator started
# later tells an unchanged child from one to send again without sending it
APPLIED_DIGEST = f"{GROUP}/applied-digest"

# the condition that says whether every generated object is the pipeline's
OWNED = "ObjectsOwned"
ALL_OWNED, NAME_TAKEN = "AllOwned", "NameTaken"
ALL_OWNED_MESSAGE = "every object of this pipeline is its own"
NAME_TAKEN_ONE = "{kind} {name} exists and is not this pipeline's ({owner})"
NAME_TAKEN_MESSAGE = (
    "{taken}: left as it is{skipped}. Rename the pipeline, remove the object, or let this pipeline take it "
    "over: kubectl annotate {resource} {name} {annotation}={pipeline}"
)
NAME_TAKEN_SKIPPED = "; not applied either, as they depend on it: {objects}"
NOT_SERVING = "nothing serves: {what}"
NOT_WRITTEN = "not applied: {objects} (see ObjectsOwned)"
# the webhook's and `validate`'s refusals (render/checks.py, runtime/admission.py)
NAME_COLLISION = (
    "pipeline {other!r} (in this namespace) makes {kind} {name!r} too: the two pipelines would fight over "
    "it; rename one of them"
)
NAME_TAKEN_AT_ADMISSION = "{kind} {name!r} exists and is not this pipeline's ({owner}); " + (
    "remove it, rename the pipeline, or have its owner annotate it {annotation}={pipeline}"
)

Verdict = Literal["ours", "adopt", "successor", "foreign"]
Ref = tuple[str, str, str]  # (apiVersion, kind, name)


@dataclass(frozen=True)
class Holder:
    """Who holds an existing object with a child's name, and whether the pipeline may write it: `ours`
    (its controller is this pipeline), `successor` (its controller was an earlier pipeline of this name,
    deleted: the garbage collector has yet to remove it), `adopt` (no controller, and its owner annotated
    it for this pipeline), else `foreign`. `owner` says who holds it, in words."""

    verdict: Verdict
    owner: str

    @property
    def writable(self) -> bool:
        return self.verdict != "foreign"


def controller(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The object's controller ownerReference, if any."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((dict(r) for r in refs if r.get("controller")), None)


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    """Whether the object's controller is the object of this UID."""
    ref = controller(obj)
    return ref is not None and ref.get("uid") == uid


def describe_owner(obj: Mapping[str, Any]) -> str:
    """Who holds the object, in words: its controller, else who wrote it (its field managers)."""
    ref = controller(obj)
    if ref is not None:
        return f"controlled by {ref.get('kind')}/{ref.get('name')}"
    managers = [
        str(m.get("manager"))
        for m in (obj.get("metadata") or {}).get("managedFields") or []
        if m.get("manager") and not m.get("subresource")
    ]
    written = f"; written by {', '.join(dict.fromkeys(managers))}" if managers else ""
    return f"no controller{written}"


def holder(obj: Mapping[str, Any], pipeline: str, uid: str) -> Holder:
    """Who holds `obj`, an existing object with a name the pipeline `pipeline` (of this UID) makes."""
    ref = controller(obj)
    owner = describe_owner(obj)
    if ref is not None and ref.get("uid") == uid:
        return Holder("ours", owner)
    if ref is not None and ref.get("kind") == KIND and ref.get("name") == pipeline:
        # one object of a kind and name lives in a namespace at a time: that pipeline was deleted
        return Holder("successor", owner)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if ref is None and annotations.get(ADOPT_ANNOTATION) == pipeline:
        return Holder("adopt", owner)
    return Holder("foreign", owner)


def ref_of(obj: Mapping[str, Any]) -> Ref:
    return (str(obj["apiVersion"]), str(obj["kind"]), str(obj["metadata"]["name"]))


def shown(ref: Ref) -> str:
    """`Kind/name`, as the operator's lines and status name an object."""
    return f"{ref[1]}/{ref[2]}"


def generated_names(pipeline: str) -> list[Ref]:
    """Every object name any spec of the pipeline named `pipeline` could render: what another pipeline of
    the namespace must not render too. Not its ConfigMaps: named by their content, `NAME-repo-DIGEST-N`,
    they cannot be another pipeline's."""
    return [
        ("apps/v1", "Deployment", pipeline),
        ("v1", "Service", pipeline),
        ("v1", "Secret", access.generated_secret_name(pipeline)),
        *optional_names(pipeline),
    ]


def optional_names(pipeline: str) -> list[Ref]:
    """(apiVersion, kind, name) of every child that only some specs of the pipeline named `pipeline`
    render."""
    return [
        *rt.possible_names(pipeline),
        ("autoscaling/v2", "HorizontalPodAutoscaler", pipeline),
        (*autoscaling_objects.SCALED_OBJECT_API, pipeline),
        (*access.NETWORK_POLICY_API, pipeline),
        (*PDB_API, pipeline),
    ]


def record_optional(deployment: dict[str, Any], rendered: Iterable[Ref]) -> dict[str, Any]:
    """The Deployment with the optional children applied with it recorded (RENDERED_OPTIONAL)."""
    meta = dict(deployment["metadata"])
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        RENDERED_OPTIONAL: ",".join(sorted(map(shown, rendered))),
    }
    return {**deployment, "metadata": meta}


def recorded_optional(live: Mapping[str, Any] | None, pipeline: str) -> set[Ref]:
    """The optional children the live Deployment records; every optional name this pipeline could have
    where it records none (a Deployment of an operator before the record, or no Deployment)."""
    names = optional_names(pipeline)
    text = (((live or {}).get("metadata") or {}).get("annotations") or {}).get(RENDERED_OPTIONAL)
    if text is None:
        return set(names)
    recorded = set(text.split(",")) if text else set()
    return {ref for ref in names if shown(ref) in recorded}


def collisions(pipeline: str, others: Iterable[str]) -> list[tuple[str, str, str]]:
    """(other pipeline, kind, name) for each object name the pipeline named `pipeline` shares with the
    other pipelines `others` of its namespace (the same name is the same pipeline)."""
    mine = {(kind, name) for _, kind, name in generated_names(pipeline)}
    return [
        (other, kind, name)
        for other in dict.fromkeys(others)
        if other != pipeline
        for _, kind, name in generated_names(other)
        if (kind, name) in mine
    ]


def could_collide(pipeline: str) -> list[str] | None:
    """The names of the other pipelines that could share an object name with the pipeline `pipeline`
    (`collisions` tells which do): each generated name is the pipeline's name and a suffix of its kind,
    so another pipeline shares one only when its name is this one's with a suffix added or taken off.
    None when a generated name is not of that shape (then every pipeline of the namespace is a
    candidate)."""
    probe = "p"
    suffixes: dict[str, list[str]] = {}
    for _, kind, name in generated_names(probe):
        if not name.startswith(probe):
            return None
        suffixes.setdefault(kind, []).append(name[len(probe) :])
    found: dict[str, None] = {}
    for _, kind, mine in generated_names(pipeline):
        for suffix in suffixes[kind]:
            if mine.endswith(suffix):
                found[mine[: len(mine) - len(suffix)]] = None
    return [name for name in found if name and name != pipeline]


def dependents(children: Children, taken: Sequence[Ref]) -> list[Ref]:
    """The children that must not be applied while the objects `taken` are another's: a Deployment
    would mount a taken ConfigMap's files or replace another's Deployment's pods; an autoscaler and a
    disruption budget would act on another's Deployment; routing objects would send traffic to another's
    Service."""
    kinds = {kind for _, kind, _ in taken}
    skipped: list[dict[str, Any]] = []
    deployment_taken = "Deployment" in kinds or "ConfigMap" in kinds
    if "ConfigMap" in kinds:
        skipped.append(children.deployment)
    if deployment_taken:
        skipped += [o for o in (children.hpa, children.scaled_object, children.disruption_budget) if o]
    if "Service" in kinds:
        skipped += list(children.routing.provider_objects)
    return [r for r in map(ref_of, skipped) if r not in taken]


def resource_name(kind: str) -> str:
    """The name kubectl takes for a kind (`kubectl annotate service ...`)."""
    return kind.lower()


def taken_message(pipeline: str, taken: Mapping[Ref, str], skipped: Sequence[Ref]) -> str:
    """The NameTaken condition's message: each taken object with its holder, what was not applied because
    of it, and how to resolve it (for the first)."""
    parts = [NAME_TAKEN_ONE.format(kind=ref[1], name=ref[2], owner=owner) for ref, owner in taken.items()]
    first = next(iter(taken))
    return NAME_TAKEN_MESSAGE.format(
        taken="; ".join(parts),
        skipped=NAME_TAKEN_SKIPPED.format(objects=", ".join(map(shown, skipped))) if skipped else "",
        resource=resource_name(first[1]),
        name=first[2],
        annotation=ADOPT_ANNOTATION,
        pipeline=pipeline,
    )


def owned_condition(pipeline: str, taken: Mapping[Ref, str], skipped: Sequence[Ref]) -> Condition:
    """ObjectsOwned: every object of the pipeline is its own, or which another holds and what was left
    out because of it (`taken`, `skipped`: reconcile/claim.py Claims)."""
    if not taken:
        return Condition(OWNED, True, ALL_OWNED, ALL_OWNED_MESSAGE)
    return Condition(OWNED, False, NAME_TAKEN, taken_message(pipeline, taken, skipped))


def managed_fields_reset(obj: Mapping[str, Any], manager: str = FIELD_MANAGER) -> list[dict[str, Any]]:
    """The managedFields of an object the operator created (POST, then apply) or adopted, once applied:
    the Apply entry of `manager` and the entries of subresources (status, scale). Another entry (the
    create's own, its earlier owner's) would keep every field it set, so a field the operator stops
    applying would stay."""
    return [
        dict(entry)
        for entry in (obj.get("metadata") or {}).get("managedFields") or []
        if entry.get("subresource") or (entry.get("manager") == manager and entry.get("operation") == "Apply")
    ]


TOP_LEVEL_KEPT = frozenset({"apiVersion", "kind", "metadata", "status"})


def replace_content(obj: Mapping[str, Any], live: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations that make `live`'s content (all but its metadata and status) `obj`'s."""
    return [
        *(
            {"op": "add", "path": f"/{key}", "value": value}
            for key, value in obj.items()
            if key not in TOP_LEVEL_KEPT
        ),
        *(
            {"op": "remove", "path": f"/{key}"}
            for key in live
            if key not in TOP_LEVEL_KEPT and key not in obj
        ),
    ]


def with_digest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The child with APPLIED_DIGEST: a SHA-256 of the child without it."""
    meta = dict(obj["metadata"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != APPLIED_DIGEST}
    bare = {**obj, "metadata": {**meta, "annotations": annotations}}
    text = json.dumps(bare, sort_keys=True, separators=(",", ":"))
    meta["annotations"] = {**annotations, APPLIED_DIGEST: hashlib.sha256(text.encode()).hexdigest()}
    return {**obj, "metadata": meta}


def applied_digest(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(APPLIED_DIGEST)


def written_by(obj: Mapping[str, Any]) -> set[str]:
    """The field managers that own fields of the object itself (not of its status or scale)."""
    return {
        str(entry.get("manager"))
        for entry in (obj.get("metadata") or {}).get("managedFields") or []
        if not entry.get("subresource")
    }
