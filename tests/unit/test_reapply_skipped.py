"""A re-apply outside a pipeline's own handlers (the resync, a restore, a drift repair, discovery) that
leaves the pipeline alone says why in one line (REAPPLY_SKIPPED): the pipeline is gone, being deleted, not
yet handled by kopf's create handler, the resync's copy is older than the last reconciled, or its spec's
refusal is backing off. The reconcile's own skips are unit tests (they return before any API call); the
re-apply's reads of the pipeline run on a real kube-apiserver (three objects, about a second).
Here the pure tests; those on real components are in tests/component/test_reapply_skipped.py."""

from __future__ import annotations

import asyncio
import logging
import time

import kopf
import pytest
from kubernetes.client import ApiClient

from support.reapply_skipped import _doc, _skipped
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.reconcile import pipeline
from tritonpipeline.reconcile.resync import left_to_others
from tritonpipeline.runtime import log_events as events
from tritonpipeline.runtime.diffbase import DIGEST_KEY
from tritonpipeline.runtime.state import OperatorState
from tritonpipeline.settings import GROUP, Settings


def test_a_resync_copy_older_than_the_last_reconciled_is_skipped_with_a_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = OperatorState(settings=Settings(), kube=Kube(ApiClient(), "test"))  # no call is made
    doc = _doc()
    doc["metadata"].update(uid="u-1", generation=3)
    state.memory(("team", "fanout")).owner = ("u-1", 4)  # a handler reconciled generation 4 meanwhile
    with caplog.at_level(logging.INFO):
        asyncio.run(pipeline.reconcile(kopf.Body(doc), state, logging.getLogger("t"), None))
    assert _skipped(caplog) == [
        "not re-applied: this copy (generation 3) is older than the one reconciled last (4)"
    ]
    assert caplog.records[-1].levelno == logging.INFO and state.pipelines[("team", "fanout")].applied is None


def test_a_refused_spec_in_its_back_off_is_skipped_with_a_line(caplog: pytest.LogCaptureFixture) -> None:
    state = OperatorState(settings=Settings(), kube=Kube(ApiClient(), "test"))  # no call is made
    body = kopf.Body(_doc())
    tag = pipeline.essence(body)[0]
    state.memory(("team", "fanout")).refused = (tag, 1, time.monotonic() + 20)
    with caplog.at_level(logging.INFO):
        asyncio.run(pipeline.reconcile(body, state, logging.getLogger("t"), None))
    (line,) = _skipped(caplog)
    assert line.startswith("not re-applied: the API server refused this spec's objects; tried again in ")
    assert line.endswith("s, or at a change") and int(line.split(" in ")[1].split("s")[0]) in (19, 20)


def test_what_a_re_apply_leaves_to_others() -> None:
    doc = _doc()
    assert left_to_others(None) == events.SKIP_GONE
    assert left_to_others(doc) == events.SKIP_UNHANDLED
    doc["metadata"]["annotations"] = {f"{GROUP}/{DIGEST_KEY}": "x"}
    assert left_to_others(doc) is None
    doc["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    assert left_to_others(doc) == events.SKIP_DELETING
