"""A re-apply outside a pipeline's own handlers (the resync, a restore, a drift repair, discovery) that
leaves the pipeline alone says why in one line (REAPPLY_SKIPPED): the pipeline is gone, being deleted, not
yet handled by kopf's create handler, the resync's copy is older than the last reconciled, or its spec's
refusal is backing off. The reconcile's own skips are unit tests (they return before any API call); the
re-apply's reads of the pipeline run on a real kube-apiserver (three objects, about a second).
Here the tests on real components; the pure ones are in tests/unit/test_reapply_skipped.py."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

from support.reapply_skipped import _doc, _skipped
from tritonpipeline.reconcile.resync import reconcile_owner
from tritonpipeline.runtime import log_events as events
from tritonpipeline.runtime.state import OperatorState
from tritonpipeline.settings import Settings


@pytest.mark.apiserver
def test_a_re_apply_says_why_it_left_a_pipeline_alone(
    kube: Any, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As read from the API server: a pipeline that is gone, one that a finalizer holds in deletion, and
    one kopf has not handled yet; none is applied (no Deployment appears)."""
    state = OperatorState(settings=Settings(), kube=kube)
    held = _doc(namespace, f"held-{uuid.uuid4().hex[:6]}")
    held["metadata"]["finalizers"] = ["test.tritonpipeline.dev/hold"]
    created = kube.apply(held)
    new = kube.apply(_doc(namespace, "new"))
    try:
        kube.delete(held["apiVersion"], "TritonPipeline", namespace, held["metadata"]["name"])
        with caplog.at_level(logging.INFO):
            for name in ("gone", held["metadata"]["name"], "new"):
                asyncio.run(reconcile_owner(state, namespace, name))
        assert _skipped(caplog) == [
            f"not re-applied: {events.SKIP_GONE}",
            f"not re-applied: {events.SKIP_DELETING}",
            f"not re-applied: {events.SKIP_UNHANDLED}",
        ]
        for name in ("gone", held["metadata"]["name"], new["metadata"]["name"]):
            assert kube.get("apps/v1", "Deployment", namespace, name) is None
    finally:
        kube.patch_json(
            created, created["metadata"]["uid"], [{"op": "remove", "path": "/metadata/finalizers"}]
        )
