"""The pipelines' children as the watches last showed them: an index the loops read instead of the API.

kopf watches the operator's children by label (handlers.py CHILDREN); every event lands here. A resync
then compares each rendered child with what it applied last and what the watch shows now, and sends only
what changed (reconcile/claim.py); the status poll reads the pods and autoscalers from here. At rest a
pipeline costs the API server nothing but its share of the loops' listing of pipelines.

What is kept: for every child its UID and `fingerprint` (its content as the operator compares it, the
same function the apply's record uses), the whole object for Deployments, HPAs and pods (status reads
them), the metadata alone for the rest (a ConfigMap's data is large and named by its content). An object
the index has not seen (its watch has not listed it yet, after a start) is unknown, never absent: the
callers then ask the API server."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..render.ownership import written_by
from ..settings import GROUP

PIPELINE_LABEL = f"{GROUP}/pipeline"
WHOLE = frozenset({"Deployment", "HorizontalPodAutoscaler", "Pod"})  # kept whole: status reads them
Key = tuple[str, str, str]  # (kind, namespace, name)


def fingerprint(obj: Mapping[str, Any]) -> int:
    """The content of an object as the operator compares it: all but its metadata and status, and its
    labels, annotations and owner references (equal for an object as applied and as a watch then shows it,
    unless someone changed it since)."""
    meta = obj.get("metadata") or {}
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    labels = {k: meta.get(k) for k in ("labels", "annotations", "ownerReferences")}
    return hash(json.dumps([body, labels], sort_keys=True, default=str))


KEPT_METADATA = ("name", "namespace", "uid", "labels", "annotations", "ownerReferences")


@dataclass(frozen=True)
class Live:
    """One child as its watch last showed it."""

    uid: str
    fingerprint: int
    body: dict[str, Any]  # whole for WHOLE kinds, else apiVersion, kind and metadata (KEPT_METADATA)
    writers: frozenset[str] = frozenset()  # the field managers that own fields of the object itself
    pipeline: str | None = None  # its pipeline label


class ChildIndex:
    """(kind, namespace, name) -> Live, fed by the watch events of the children."""

    def __init__(self) -> None:
        self._live: dict[Key, Live] = {}

    def observe(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        kind, meta = str(obj.get("kind")), obj.get("metadata") or {}
        key = (kind, str(meta.get("namespace")), str(meta.get("name")))
        if deleted:
            self._live.pop(key, None)
            return
        if kind in WHOLE:
            body = dict(obj)  # a kopf Body is a mapping over the decoded JSON
        else:
            kept = {k: meta[k] for k in KEPT_METADATA if k in meta}
            body = {"apiVersion": obj.get("apiVersion"), "kind": kind, "metadata": kept}
        pipeline = (meta.get("labels") or {}).get(PIPELINE_LABEL)
        self._live[key] = Live(
            str(meta.get("uid")), fingerprint(obj), body, frozenset(written_by(obj)), pipeline
        )

    def get(self, kind: str, namespace: str, name: str) -> Live | None:
        return self._live.get((kind, namespace, name))

    def of(self, kind: str, namespace: str, pipeline: str) -> list[dict[str, Any]]:
        """The bodies of the pipeline's objects of `kind` (by its label), as kept."""
        return [
            live.body
            for (k, ns, _), live in self._live.items()
            if k == kind and ns == namespace and live.pipeline == pipeline
        ]

    def forget(self, namespace: str) -> None:
        """Drop a namespace's objects (it is being deleted)."""
        for key in [k for k in self._live if k[1] == namespace]:
            del self._live[key]

    def __len__(self) -> int:
        return len(self._live)
