"""Which pipeline an object is, or belongs to; loggers that name it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from ..settings import GROUP, VERSION


def pipeline_logger(memo: kopf.Memo, cr: Mapping[str, Any]) -> logging.LoggerAdapter[Any]:
    """A logger whose lines carry the pipeline's namespace/name (posts no Events), for work done
    outside the pipeline's own handlers (resync, child and Deployment events)."""
    settings = memo.get("kopf_settings") or kopf.OperatorSettings()
    return kopf.LocalObjectLogger(body=cr, settings=settings)  # type: ignore[arg-type]


def pipeline_ref(namespace: str, name: str, uid: str | None = None) -> dict[str, Any]:
    meta = {"namespace": namespace, "name": name, "uid": uid}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TritonPipeline", "metadata": meta}


def namespace_of(body: kopf.Body) -> str:
    """The namespace of a TritonPipeline or one of its children (all namespaced)."""
    namespace = body.metadata.namespace
    if namespace is None:
        raise kopf.PermanentError(f"{body.get('kind')} {body.metadata.name} has no namespace")
    return namespace


def owner_of(body: kopf.Body) -> dict[str, Any] | None:
    """The owner reference of the TritonPipeline that controls this child, if any."""
    refs = body.metadata.get("ownerReferences") or []
    return next((o for o in refs if o.get("kind") == "TritonPipeline" and o.get("controller")), None)


def forget(memo: kopf.Memo, namespace: str, name: str) -> None:
    """Drop what the operator remembers of a deleted pipeline."""
    for store in (memo.statuses, memo.owners, memo.optional, memo.applied):
        store.pop((namespace, name), None)
