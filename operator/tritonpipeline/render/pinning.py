"""What a pipeline's pods run changes only when its spec changes, or when someone asks (pure).

A new operator version may render a pipeline's pods differently (another init image, new args, new router
code in the generated configs). Applying that at once would roll every Triton pod of the cluster on an
operator upgrade. So the operator records on each Deployment the pipeline generation and the roll request
its pod template was rendered for (`RENDERED_GENERATION`, `ROLLED`). While both still hold, a reconcile
keeps the pod template and the generated ConfigMaps as they are (`pinned`) and the pipeline's status says
what a fresh rendering would change (`UpToDate=False`, `OperatorUpgraded`). The new rendering reaches the
pods when the spec changes, when someone sets the pipeline's `ROLL_ANNOTATION` to a new value, or when the
operator's `rollOutdated` setting rolls outdated pipelines N at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..settings import FIELD_MANAGER, GROUP
from .access import ADMIN_KEY_CREATED
from .disruption import DRAIN_ANNOTATION

# on the TritonPipeline: set to a new value (a timestamp) to have its pods get the operator's rendering
ROLL_ANNOTATION = f"{GROUP}/roll"
# on the Deployment: the generation and the roll request its pod template was rendered for
RENDERED_GENERATION = f"{GROUP}/rendered-generation"
ROLLED = f"{GROUP}/rolled"
MAX_DIFFERENCES = 4  # named in the condition's message; the rest are counted

UP_TO_DATE = "UpToDate"
CURRENT, OPERATOR_UPGRADED, ROLL_QUEUED = "Current", "OperatorUpgraded", "RollQueued"
PINNED_MESSAGE = (
    "the pods run what an earlier operator rendered for generation {generation}; this operator's rendering "
    "differs in {differences}. They get it when the spec changes, or now with `kubectl annotate "
    "tritonpipeline {name} {annotation}=$(date +%s) --overwrite`"
)
QUEUED_MESSAGE = " (queued: the operator rolls {slots} outdated pipeline(s) at a time)"


@dataclass(frozen=True)
class Decision:
    """Whether the live pod template stays (`pinned`), and what a fresh rendering would change."""

    pinned: bool
    differences: tuple[str, ...] = ()


def roll_request(cr: dict[str, Any]) -> str:
    """The pipeline's roll request (empty: none)."""
    return str(((cr.get("metadata") or {}).get("annotations") or {}).get(ROLL_ANNOTATION, ""))


def record(deployment: dict[str, Any], generation: int | None, roll: str) -> dict[str, Any]:
    """The rendered Deployment with the generation and roll request it is rendered for."""
    out = json.loads(json.dumps(deployment))
    annotations = out["metadata"].setdefault("annotations", {})
    annotations[RENDERED_GENERATION] = str(generation)
    annotations[ROLLED] = roll
    return out


Path = tuple[str | tuple[str], ...]  # keys, and (name,) for the list item of that name


def _leaves(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(path, value) of every leaf of `value`; list items named by their `name` when they all have one."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value and all(isinstance(i, dict) and "name" in i for i in value):
        for item in value:
            yield from _leaves(item, (*path, (str(item["name"]),)))
    else:
        yield path, value


def _at(value: Any, path: Path) -> Any:
    """The value at `path` in `value` (None when absent)."""
    for part in path:
        if isinstance(part, tuple):
            items = value if isinstance(value, list) else []
            value = next((i for i in items if isinstance(i, dict) and i.get("name") == part[0]), None)
        else:
            value = value.get(part) if isinstance(value, dict) else None
    return value


def _shown(path: Path) -> str:
    return "".join(f"[{p[0]}]" if isinstance(p, tuple) else f".{p}" for p in path).lstrip(".")


def template_differences(
    rendered: dict[str, Any], live: dict[str, Any], owned: list[Path] | None = None
) -> list[str]:
    """What the rendered pod template sets differently from the live one, one `path (old -> new)` each:
    the rendered fields, and those of `owned` (the fields the operator's earlier apply set: owned_paths)
    that the rendering drops, which server-side apply would remove. Not the rest of the live template: it
    also holds the API server's defaults."""
    changed = [
        f"template.{_shown(path)} ({_short(_at(live, path))} -> {_short(value)})"
        for path, value in _leaves(rendered)
        if not _same(_at(live, path), value)
    ]
    dropped = [
        f"template.{_shown(path)} ({_short(_at(live, path))} -> absent)"
        for path in owned or []
        if _same(_at(rendered, path), None) and not _same(_at(live, path), None)
    ]
    return changed + dropped


def owned_paths(obj: dict[str, Any], prefix: tuple[str, ...]) -> list[Path]:
    """The leaves below `prefix` of `obj` that the operator's server-side apply owns (its managedFields
    entry), as _leaves names them: a list item by its `name` (managedFields key items by their merge key,
    such as a volume mount's mountPath), a list whose items have no name as one leaf."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply":
            node: dict[str, Any] = entry.get("fieldsV1") or {}
            value: Any = obj
            for key in prefix:
                node, value = node.get(f"f:{key}") or {}, (value or {}).get(key)
            return list(dict.fromkeys(_owned(node, value, ())))
    return []


def _owned(node: dict[str, Any], value: Any, path: Path) -> Iterator[Path]:
    children = {key: sub for key, sub in node.items() if key != "."}
    if not children:
        if path:
            yield path
        return
    for key, sub in children.items():
        if key.startswith("f:"):
            child = value.get(key[2:]) if isinstance(value, dict) else None
            yield from _owned(sub, child, (*path, key[2:]))
        elif key.startswith("k:"):  # a list item by its merge key
            wanted = json.loads(key[2:])
            items = value if isinstance(value, list) else []
            item = next((i for i in items if isinstance(i, dict) and _matches(i, wanted)), None)
            if item is None:
                continue
            if not all(isinstance(i, dict) and "name" in i for i in items):
                yield path  # _leaves takes such a list whole
                return
            yield from _owned(sub, item, (*path, (str(item["name"]),)))
        else:  # `v:` (a set's value), `i:` (an index): the list is one leaf
            yield path
            return


def _matches(item: dict[str, Any], key: dict[str, Any]) -> bool:
    return all(item.get(k) == v or str(item.get(k)) == str(v) for k, v in key.items())


def _same(live: Any, rendered: Any) -> bool:
    """Equal, counting an empty list or mapping as absent (the API server drops them)."""
    return live == rendered or (live in (None, [], {}) and rendered in (None, [], {}))


def _short(value: Any) -> str:
    text = "absent" if value is None else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def configmap_differences(rendered: list[dict[str, Any]], live: dict[str, dict[str, Any]]) -> list[str]:
    """The generated ConfigMaps a fresh rendering would add (live: name -> ConfigMap): they are named by
    their content (meta.configmap_name), so a rendering that changes the configs names other ones."""
    return [
        f"the generated configs (ConfigMap {cm['metadata']['name']})"
        for cm in rendered
        if cm["metadata"]["name"] not in live
    ]


def projected_configmaps(template: dict[str, Any]) -> list[str]:
    """The ConfigMaps a pod template reads the generated configs from."""
    return [
        source["configMap"]["name"]
        for volume in (template.get("spec") or {}).get("volumes") or []
        for source in (volume.get("projected") or {}).get("sources") or []
        if "configMap" in source
    ]


def decide(
    generation: int | None,
    observed_generation: int | None,
    roll: str,
    rendered: dict[str, Any],
    configmaps: list[dict[str, Any]],
    live: dict[str, Any] | None,
    live_configmaps: dict[str, dict[str, Any]],
) -> Decision:
    """Keep the live pod template (and its ConfigMaps) when it was rendered for this generation and roll
    request and a fresh rendering differs; the Deployment of an operator before this rule carries no record,
    and counts as rendered for the generation the pipeline's status says was last reconciled. Never pinned:
    a new Deployment, one whose ConfigMaps are gone (its pods could not start again), or no difference."""
    if live is None:
        return Decision(False)
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    recorded = annotations.get(RENDERED_GENERATION)
    if recorded is None:
        same_spec = observed_generation is not None and observed_generation == generation
        same_roll = roll == ""
    else:
        same_spec, same_roll = recorded == str(generation), annotations.get(ROLLED, "") == roll
    if not (same_spec and same_roll):
        return Decision(False)
    template = (live.get("spec") or {}).get("template") or {}
    if any(name not in live_configmaps for name in projected_configmaps(template)):
        return Decision(False)
    if foreign_pod_spec_fields(live):  # not an earlier operator's rendering: restored, not kept
        return Decision(False)
    differences = [
        *template_differences(
            rendered["spec"]["template"], template, owned_paths(live, ("spec", "template"))
        ),
        *configmap_differences(configmaps, live_configmaps),
    ]
    return Decision(bool(differences), tuple(differences))


def foreign_pod_spec_fields(deployment: dict[str, Any], manager: str = FIELD_MANAGER) -> list[str]:
    """The field managers other than `manager` that own fields of the pod's spec which `manager` does not
    own too (`kubectl set image`, `kubectl set env`, `kubectl edit`, a patch): a template someone edited
    so is no earlier operator's rendering (keeping it kept a tampered image), and what they added stays
    through a server-side apply of `manager`. A manager that only co-owns the operator's fields (or owns
    a whole struct whose fields the operator owns) is not one; template metadata (`kubectl rollout
    restart`'s annotation) and the subresources (the HPA's scale, the controller's status) do not count."""
    ours: set[tuple[str, ...]] = set()
    theirs: dict[str, set[tuple[str, ...]]] = {}
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        if entry.get("subresource"):
            continue
        fields = entry.get("fieldsV1") or {}
        pod_spec = ((fields.get("f:spec") or {}).get("f:template") or {}).get("f:spec") or {}
        leaves = set(_field_leaves(pod_spec, ()))
        if entry.get("manager") == manager:
            ours |= leaves
        elif leaves:
            theirs.setdefault(str(entry.get("manager") or "?"), set()).update(leaves)
    covered = ours | {path[:i] for path in ours for i in range(1, len(path))}
    return sorted(name for name, leaves in theirs.items() if leaves - covered)


def _field_leaves(node: dict[str, Any], path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The paths of a managedFields fieldsV1 tree's leaves (`.`, an item itself, counts as one)."""
    for key, sub in node.items():
        if isinstance(sub, dict) and sub:
            yield from _field_leaves(sub, (*path, key))
        else:
            yield (*path, key)


def pinned_deployment(rendered: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """The rendered Deployment with the live pod template and the live record (nothing the pods see
    changes; the rest of the Deployment, its replicas and strategy, follows the spec)."""
    out = json.loads(json.dumps(rendered))
    out["spec"]["template"] = json.loads(json.dumps(live["spec"]["template"]))
    # the restarts for a new admin key and for a drain are other field managers' (access.admin_key_roll,
    # disruption.drain_restart): left to them, not taken over, so no later rendering counts them as fields
    # the operator stops setting
    template_annotations = out["spec"]["template"].get("metadata", {}).get("annotations") or {}
    for restart in (ADMIN_KEY_CREATED, DRAIN_ANNOTATION):
        template_annotations.pop(restart, None)
    live_annotations = (live.get("metadata") or {}).get("annotations") or {}
    annotations = out["metadata"].setdefault("annotations", {})
    for key in (RENDERED_GENERATION, ROLLED):
        if key in live_annotations:
            annotations[key] = live_annotations[key]
    return out


def describe(differences: tuple[str, ...]) -> str:
    shown = ", ".join(differences[:MAX_DIFFERENCES])
    more = len(differences) - MAX_DIFFERENCES
    return shown + (f" and {more} more" if more > 0 else "")


def rollout_done(deployment: dict[str, Any]) -> bool:
    """The Deployment controller has brought every replica to the current template, and no old pod is left."""
    meta, spec, status = (deployment.get(k) or {} for k in ("metadata", "spec", "status"))
    want = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas", 0))
    return (
        int(status.get("observedGeneration", 0)) >= int(meta.get("generation", 0))
        and updated >= want
        and int(status.get("availableReplicas", 0)) >= want
        and int(status.get("replicas", 0)) == updated
    )
