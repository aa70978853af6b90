"""Which pipeline an object is, or belongs to."""

from __future__ import annotations

from typing import Any

import kopf

from ..settings import API_VERSION, KIND


def pipeline_ref(namespace: str, name: str, uid: str | None = None) -> dict[str, Any]:
    meta = {"namespace": namespace, "name": name, "uid": uid}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}


def namespace_of(body: kopf.Body) -> str:
    """The namespace of a TritonPipeline or one of its children (all namespaced)."""
    namespace = body.metadata.namespace
    if namespace is None:
        raise kopf.PermanentError(f"{body.get('kind')} {body.metadata.name} has no namespace")
    return namespace


def owner_of(body: kopf.Body) -> dict[str, Any] | None:
    """The owner reference of the TritonPipeline that controls this child, if any."""
    refs = body.metadata.get("ownerReferences") or []
    return next((o for o in refs if o.get("kind") == KIND and o.get("controller")), None)
