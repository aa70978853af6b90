"""What a platform team runs on: the operator's log lines, its /metrics (scraped by the real Prometheus),
its liveness and readiness. The operator runs as a real subprocess against the real kube-apiserver.
Here the pure tests; those on real components are in tests/component/test_operator_observability.py."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from tritonpipeline.reconcile.apply import changes
from tritonpipeline.runtime import metrics
from tritonpipeline.runtime.health import WatchHealth


def test_the_per_pipeline_and_loop_gauges_read_the_last_status_and_the_loops():
    """tritonpipeline_operator_pipeline_ready is 1 only for Ready=True (False, Unknown and no condition
    yet read 0); the replica gauges appear once the status has them; loop_stalled is Loops.stalled()."""
    statuses = {
        ("ml", "vision"): {
            "conditions": [{"type": "Ready", "status": "True"}],
            "replicas": 3,
            "readyReplicas": 2,
        },
        ("ml", "asr"): {"conditions": [{"type": "Ready", "status": "False", "reason": "PodsNotReady"}]},
        ("team-b", "fresh"): {},
    }
    registry = CollectorRegistry()
    registry.register(metrics.PipelineCollector(lambda: statuses))
    registry.register(metrics.LoopsCollector(lambda: {"resync": True, "leadership": False}))
    text = generate_latest(registry).decode()
    for series in (
        'tritonpipeline_operator_pipeline_ready{pipeline="vision",pipeline_namespace="ml"} 1.0',
        'tritonpipeline_operator_pipeline_ready{pipeline="asr",pipeline_namespace="ml"} 0.0',
        'tritonpipeline_operator_pipeline_ready{pipeline="fresh",pipeline_namespace="team-b"} 0.0',
        'tritonpipeline_operator_pipeline_replicas{pipeline="vision",pipeline_namespace="ml"} 3.0',
        'tritonpipeline_operator_pipeline_ready_replicas{pipeline="vision",pipeline_namespace="ml"} 2.0',
        'tritonpipeline_operator_loop_stalled{loop="resync"} 1.0',
        'tritonpipeline_operator_loop_stalled{loop="leadership"} 0.0',
    ):
        assert series in text
    assert 'replicas{pipeline="asr"' not in text  # not read yet: no series rather than a made-up 0


# --------------------------------------------------------------------------------- pure pieces, no server


def test_watch_health_turns_stale_per_stream():
    now = [100.0]
    health = WatchHealth(30, clock=lambda: now[0])
    assert health.problems() == [] and health.not_ready() == "no watch stream has connected yet"
    now[0] = 131
    assert health.problems() == ["no watch stream has connected in 31s (limit 30s)"]
    assert health.opening("/api/v1/configmaps") is False
    health.connect("/api/v1/configmaps")
    assert health.opening("/api/v1/configmaps") is True  # a re-open is a restart
    health.connect("/apis/apps/v1/deployments")
    now[0] = 150
    health.connect("/apis/apps/v1/deployments")
    now[0] = 170
    assert health.problems() == ["watch /api/v1/configmaps has not reconnected for 39s (limit 30s)"]
    assert health.not_ready() == health.problems()[0]


def _applied(uid: str, created: str, ours: str | None, data: str = "a") -> dict[str, Any]:
    fields = [{"manager": "kube-controller-manager", "operation": "Update", "time": "2030-01-01T00:00:09Z"}]
    if ours:
        fields.append({"manager": "op", "operation": "Apply", "time": ours})
    meta = {"name": "x", "uid": uid, "creationTimestamp": created, "managedFields": fields}
    return {"kind": "ConfigMap", "metadata": meta, "data": {"k": data}}


def test_changes_reads_the_apply_stamp_of_our_own_field_manager():
    since = 1893456005.4  # 2030-01-01T00:00:05.4Z
    t5, t6, old = "2030-01-01T00:00:05Z", "2030-01-01T00:00:06Z", "2029-01-01T00:00:00Z"
    # after a start (nothing seen before): the stamps decide
    assert changes([_applied("u", t5, t5)], "op", since, None)[:2] == (["ConfigMap/x"], [])
    assert changes([_applied("u", old, t6)], "op", since, None)[:2] == ([], ["ConfigMap/x"])
    # another manager's later write (a controller) is not our change; no stamp of ours, no change
    assert changes([_applied("u", old, "2030-01-01T00:00:04Z")], "op", since, None)[:2] == ([], [])
    assert changes([_applied("u", old, None)], "op", since, None)[:2] == ([], [])
    # within the second of the previous reconcile: the same object, stamp and content are unchanged
    _, _, seen = changes([_applied("u", t5, t5)], "op", since, None)
    assert changes([_applied("u", t5, t5)], "op", since, seen)[:2] == ([], [])
    assert changes([_applied("u", t5, t5, data="b")], "op", since, seen)[:2] == ([], ["ConfigMap/x"])
    assert changes([_applied("v", t5, t5)], "op", since, seen)[:2] == (["ConfigMap/x"], [])  # re-created


def test_kopf_keeps_connections_for_requests_beside_every_watch_stream() -> None:
    """Each resource a handler watches holds one of kopf's connections per namespace for good; the
    connection limit counts them (handlers.WATCHED), or requests such as Event posts wait forever once
    the streams take every connection (seen with two namespaces and peering)."""
    import kopf

    from tritonpipeline import handlers

    registry = kopf.get_default_registry()
    kinds = [registry._changing, registry._watching, registry._spawning, registry._indexing]
    watched = {
        (h.selector.group, h.selector.version, h.selector.any_name)
        for kind in kinds
        for h in kind.get_all_handlers()
        if h.selector is not None
    }
    assert watched == set(handlers.WATCHED)
    # two namespaces: 9 streams each (8 resources and the peering object), the CRD and namespace observers
    assert handlers.watch_streams(("a", "b")) == 20
    assert handlers.watch_streams(()) == 11
