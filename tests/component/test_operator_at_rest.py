"""Cheap at rest, on a real kube-apiserver: pipelines that nothing changes cost the API server no write and
next to no read, resync after resync, and after a restart of the operator (the counts are the apiserver's
own `apiserver_request_total`). `make bench-controlplane` measures the same at scale."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from bench.controlplane.apiserver_metrics import api_snapshot
from component.test_operator import wait_reconciled
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import cluster_doc
from tritonpipeline import handlers

pytestmark = pytest.mark.apiserver

WRITES = frozenset({"APPLY", "PATCH", "POST", "PUT", "DELETE", "DELETECOLLECTION", "CREATE", "UPDATE"})
# the API server's own requests (its identity lease, renewed every few seconds)
APISERVER_OWN = frozenset({"leases"})
PIPELINES = 3
WINDOW = 6.0  # seconds counted: six resyncs and six status polls of every pipeline
ENV = {"TRITONPIPELINE_RESYNC_SECONDS": "1", "TRITONPIPELINE_STATUS_POLL_SECONDS": "1"}


def requests_during(control_plane: Any, seconds: float) -> Counter[str]:
    """'VERB resource' -> requests the API server answered in the next `seconds` (watches left out)."""
    before = api_snapshot(control_plane)[0]
    time.sleep(seconds)
    delta = api_snapshot(control_plane)[0] - before
    found: Counter[str] = Counter()
    for (verb, resource, _), count in delta.items():
        if verb not in ("WATCH", "CONNECT") and resource not in APISERVER_OWN:
            found[f"{verb} {resource}"] += count
    return found


# what the operator watches: each watch lists its resource once as it starts
WATCHED = frozenset(plural for _, _, plural in handlers.WATCHED)


def listed_since(control_plane: Any, before: Counter[Any]) -> set[str]:
    """The resources the API server answered a LIST of since the snapshot `before`."""
    delta = api_snapshot(control_plane)[0] - before
    return {resource for (verb, resource, _), count in delta.items() if verb == "LIST" and count}


def settled(op: LocalOperator, lines: int) -> bool:
    """Whether the operator logged `lines` more reconcile outcome lines than it had (resyncs ran)."""
    return len([x for x in op.lines() if "] reconcile " in x]) >= lines


def test_unchanged_pipelines_cost_no_write_and_a_list_per_pass(
    control_plane: Any, kube: Any, namespace: str, run_operator: Callable[..., LocalOperator]
) -> None:
    started = api_snapshot(control_plane)[0]
    op = run_operator(ENV)
    for i in range(PIPELINES):
        kube.apply(cluster_doc(f"p{i}", namespace))
    for i in range(PIPELINES):
        wait_reconciled(kube, namespace, f"p{i}")
    wait_for("a few resyncs", lambda: settled(op, 3 * PIPELINES))
    # every watch has made its first list (on a busy machine one came inside the window once)
    wait_for("every watch listed", lambda: listed_since(control_plane, started) >= WATCHED)
    found = requests_during(control_plane, WINDOW)
    writes = {k: v for k, v in found.items() if k.split()[0] in WRITES}
    assert writes == {}, f"writes at rest: {dict(found)}"
    # the resync and the status poll list the pipelines once a pass each: the rest is the children's
    # business of the watches (one pass may straddle the window's edges)
    per_pass = 2
    assert sum(found.values()) <= per_pass * (WINDOW + 2), dict(found)
    # a child's watch that reopens (its connection dropped on a busy machine) lists its kind once more:
    # the watch's doing, not a pass's (a pass listing children would do so every second of the window)
    reopened = {
        k: n
        for k, n in found.items()
        if k.startswith("LIST ") and k.split()[1] in WATCHED - {"tritonpipelines"}
    }
    assert all(n == 1 for n in reopened.values()), dict(found)
    assert set(found) - set(reopened) <= {"LIST tritonpipelines"}, dict(found)

    # a restart: the new process reconciles every pipeline once, writes none of its unchanged children
    op.stop()
    before = api_snapshot(control_plane)[0]
    op = run_operator(ENV)
    wait_for("every pipeline resumed", lambda: settled(op, PIPELINES))
    wait_for("a resync after", lambda: settled(op, 2 * PIPELINES))
    delta = api_snapshot(control_plane)[0] - before
    child_writes = {
        f"{verb} {res}": n
        for (verb, res, _), n in delta.items()
        if verb in WRITES and res not in ("tritonpipelines", "events", *APISERVER_OWN) and n
    }
    # the admin-key Secret is POSTed once per pipeline and process (409: it exists); nothing else
    assert child_writes == {"POST secrets": PIPELINES}, dict(delta)
    # nor is anything read per pipeline that the watches' listing shows: the resume reconcile writes the
    # status, no mirror of a listed Deployment or pod reads the pipeline, its Deployment or its pods
    reads = Counter(f"{verb} {res}" for (verb, res, _), n in delta.items() for _ in range(int(n)))
    assert reads["GET tritonpipelines"] == reads["GET deployments"] == 0, dict(reads)
    assert reads["LIST pods"] <= 2, dict(reads)  # the pods' watch lists them (once, or again on a resume)


def test_the_operator_caps_its_malloc_arenas() -> None:
    """bench-controlplane: the restarted operator's peak RSS went from 155 MB to 140 MB with two glibc
    arenas instead of one per thread. False (and nothing changed) where the C library is not glibc."""
    import platform

    from tritonpipeline.runtime.memory import limit_malloc_arenas

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert limit_malloc_arenas() is expected
