"""What only several nodes show, on the kind cluster of `make e2e` (one control plane, two workers): a
pipeline's replicas spread over both workers, and a worker drained with `kubectl drain` while streams run:
no sequence broken (routing.sessionAffinity Stream, the mode docs/concepts/sequences.md recommends for
streams), the pipeline whole again on the other worker, the operator rescheduled there and applying a
spec change made meanwhile.
Marker `node`; it needs two schedulable nodes, so on a cluster of one it skips and says so."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from node_cluster import (
    NAMESPACE,
    RELEASE_NS,
    Cluster,
    active_operator_pod,
    condition,
    diagnostics,
    pod_ready,
    pods,
    start_streams,
    stream_pipeline,
    stream_results,
    wait,
)

pytestmark = [pytest.mark.node, pytest.mark.anycluster, pytest.mark.timeout(900)]

NAME = "spread"
CHUNKS, GAP, LANES = 40, 0.4, 6  # 16 s sequences, six at a time: a drain always finds some open


def schedulable_nodes(cluster: Cluster) -> list[str]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    return [
        n["metadata"]["name"]
        for n in nodes
        if not n["spec"].get("unschedulable")
        and not any(t.get("effect") == "NoSchedule" for t in n["spec"].get("taints") or [])
    ]


@pytest.fixture
def workers(cluster: Cluster) -> list[str]:
    names = schedulable_nodes(cluster)
    if len(names) < 2:
        pytest.skip(f"needs two schedulable nodes, this cluster has {names}: make e2e runs it on kind")
    return names


def placement(cluster: Cluster) -> dict[str, str]:
    """pod -> node of the pipeline's live (not terminating) pods."""
    live = [p for p in pods(cluster, NAME) if not p["metadata"].get("deletionTimestamp")]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in live}


def test_replicas_spread_over_the_workers_and_a_drained_worker_keeps_streams_whole(
    cluster: Cluster, chart_operator: dict[str, Any], workers: list[str], record_property: Any
) -> None:
    doc = stream_pipeline(cluster, NAME)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    drained = ""
    try:

        def spread() -> bool:
            live = [p for p in pods(cluster, NAME) if not p["metadata"].get("deletionTimestamp")]
            return len(live) == 2 and all(pod_ready(p) for p in live)

        wait("2 pods Ready", spread, 240, lambda: diagnostics(cluster, NAMESPACE))
        where = placement(cluster)
        # the operator's preferred anti-affinity puts the replicas on different nodes
        assert len(set(where.values())) == 2, where
        operator = active_operator_pod(cluster)
        drained = operator["spec"]["nodeName"]
        assert drained in workers
        load = start_streams(cluster, NAME, LANES, CHUNKS, GAP)
        try:
            time.sleep(CHUNKS * GAP / 2)  # sequences open on both pods
            t0 = time.monotonic()
            # the worker of the active operator pod and of one replica; eviction honours the PDBs and
            # the leaving replica's preStop (it serves its open streams to their end)
            cluster.kubectl(
                "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s"
            )
            drain_s = time.monotonic() - t0
            # a spec change while the operator is moving: the new active pod must apply it
            cluster.kubectl("patch", "tritonpipeline", NAME, "-n", NAMESPACE, "--type", "merge",
                            "-p", json.dumps({"metadata": {"labels": {"drained": "yes"}},
                                              "spec": {"server": {"resources": {"requests": {
                                                  "cpu": "110m", "memory": "256Mi"}}}}}))  # fmt: skip
            generation = json.loads(
                cluster.kubectl("get", "tritonpipeline", NAME, "-n", NAMESPACE, "-o", "json")
            )["metadata"]["generation"]
            successor = active_operator_pod(cluster, not_uid=operator["metadata"]["uid"], timeout=120)
            assert successor["spec"]["nodeName"] != drained

            def converged() -> bool:
                cr = json.loads(cluster.kubectl("get", "tritonpipeline", NAME, "-n", NAMESPACE, "-o", "json"))
                ready = condition(cluster, NAME, "Ready").get("status") == "True"
                return cr["status"].get("observedGeneration") == generation and ready and spread()

            wait("the pipeline converged on the other worker", converged, 300,
                 lambda: diagnostics(cluster, NAMESPACE) + diagnostics(cluster, RELEASE_NS))  # fmt: skip
            assert set(placement(cluster).values()) == {n for n in workers if n != drained}
            time.sleep(CHUNKS * GAP)  # sequences opened after the drain run to their end too
        finally:
            load.send_signal(signal.SIGTERM)
            out, _ = load.communicate(timeout=120)
    finally:
        if drained:
            cluster.kubectl("uncordon", drained, check=False)
        cluster.kubectl("delete", "tritonpipeline", NAME, "-n", NAMESPACE, "--wait=false", check=False)
    records, broken = stream_results(out)
    print(f">> drained {drained} in {drain_s:.1f}s; {len(records)} sequences, {len(broken)} broken")
    record_property("sequences", len(records))
    record_property("broken", len(broken))
    record_property("drain_seconds", round(drain_s, 1))
    assert len(records) >= 2 * LANES and not broken, broken[:3]
