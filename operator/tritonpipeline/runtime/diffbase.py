"""Where kopf keeps what it last handled of a pipeline: a digest, not a copy.

kopf's own AnnotationsDiffBaseStorage keeps the whole handled object (spec, labels, annotations) as
JSON in one annotation. Kubernetes allows 256 KiB of annotations per object, keys and values together,
so a pipeline whose spec is larger than that less its other annotations (a spec of ~250 KB applied
server-side; ~128 KB with client-side `kubectl apply`, whose last-applied-configuration annotation
holds the spec again) could never be marked handled: every patch was refused, and the pipeline was
handled as new again and again (a traceback and a Created event each time). The operator's handlers
read no diff, only that something changed and whether it was the spec or only the labels and
annotations, so two SHA-256 digests of the same content are enough: 129 characters whatever the spec's
size.

A pipeline last handled by an operator that kept the copy keeps being compared with that copy until
its next change, when the copy is replaced by the digest (no pipeline looks new after an upgrade; a
resume that finds no change stores nothing).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import kopf

DIGEST_KEY = "last-handled-digest"  # serving.tritonpipeline.io/last-handled-digest
COPY_KEY = "last-handled-configuration"  # kopf's key, where earlier releases kept the copy
CHANGED = "changed"  # the essence fetch() answers when the digest differs: any value the new one lacks
SEPARATOR = "."  # between the digest of the spec and that of the labels and annotations


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base as `<prefix>/last-handled-digest`: sha256 of the handled essence."""

    def __init__(self, *, prefix: str) -> None:
        super().__init__(prefix=prefix, key=DIGEST_KEY)
        self._copies = kopf.AnnotationsDiffBaseStorage(prefix=prefix, key=COPY_KEY)

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        self.remove_annotations(essence, set(self._copies.make_keys(COPY_KEY, body=body)))
        self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body: kopf.Body) -> Any:
        """The essence last handled: the current one when its digest is the one stored; where it is not, a
        stand-in that differs from it in the part that changed (the spec, or the labels and annotations:
        kopf's diff then says which, and kopf runs the update handler); kopf's stored copy where there is
        no digest yet; None for a pipeline never handled (kopf runs the create handler)."""
        stored = next(
            (v for k in self.make_keys(DIGEST_KEY, body=body) if (v := body.metadata.annotations.get(k))),
            None,
        )
        if stored is None:
            return self._copies.fetch(body=body)
        current = self.build(body=body)
        content, metadata = self.digest(current).split(SEPARATOR)
        was = stored.strip().split(SEPARATOR)
        if len(was) != 2:
            was = [stored.strip(), stored.strip()]  # not ours: both parts changed
        if [content, metadata] == was:
            return current
        stand_in = dict(current)
        if content != was[0]:
            stand_in = {k: v for k, v in stand_in.items() if k == "metadata"} | {"spec": {CHANGED: was[0]}}
        if metadata != was[1]:
            stand_in["metadata"] = {CHANGED: was[1]}
        return stand_in

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        for key in self.make_keys(DIGEST_KEY, body=body):
            patch.metadata.annotations[key] = self.digest(essence)
        for key in self._copies.make_keys(COPY_KEY, body=body):
            if key in body.metadata.annotations:
                patch.metadata.annotations[key] = None  # the copy an earlier release kept goes
        self._store_marker(prefix=self.prefix, patch=patch, body=body)

    def digest(self, essence: Any) -> str:
        """`SHA.SHA`: sha256 of an essence's canonical JSON without its metadata, and of its labels and
        annotations. The status and the annotations of the operator's own prefix (kopf's progress
        records, its marker, the roll request) are left out, as kopf leaves them out of its diff once the
        prefix is marked; empty labels or annotations count as none."""
        content = cast(dict[str, Any], json.loads(json.dumps(essence)))
        content.pop("status", None)
        metadata = content.pop("metadata", None) or {}
        own = f"{self.prefix}/"
        annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if not k.startswith(own)}
        kept = {**metadata, "labels": metadata.get("labels") or {}, "annotations": annotations}
        kept = {k: v for k, v in kept.items() if v not in ({}, None)}
        return SEPARATOR.join(_sha(part) for part in (content, kept))


def _sha(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def handled(cr: dict[str, Any], prefix: str) -> bool:
    """Whether kopf has handled the pipeline at least once (its diff base is stored, as a digest or, by an
    earlier release, as a copy): until then its creation is kopf's to handle."""
    annotations = (cr.get("metadata") or {}).get("annotations") or {}
    return f"{prefix}/{DIGEST_KEY}" in annotations or f"{prefix}/{COPY_KEY}" in annotations


def spec_changed(diff: Any) -> bool:
    """Whether kopf's diff of an update (items of operation, field path, old, new) changes anything but
    the labels and annotations."""
    return any(tuple(item[1])[:1] != ("metadata",) for item in diff)
