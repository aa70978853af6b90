"""`routing.sessionAffinity: Stream` on real pods, the short form of `make bench-streams`: sequences of
tritonpipeline.client.SequenceStream stay whole while the pipeline scales down, because the leaving pod
serves its open streams to their end; and it leaves soon after the last of them closes, not at
routing.streamDrainSeconds (a stream of the client helper left open would hold it that long; idle
connections hold nothing: tests/unit/test_stream_leases.py).
Marker `node`: `make e2e`."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from node_cluster import (
    NAMESPACE,
    Cluster,
    condition,
    diagnostics,
    pods,
    start_streams,
    stream_pipeline,
    stream_results,
    wait,
)
from tritonpipeline.render.autoscaling_objects import PRE_STOP_SECONDS

pytestmark = [pytest.mark.node, pytest.mark.anycluster, pytest.mark.timeout(600)]

NAME = "drained"
DRAIN_S = 120  # the cap; the pod must leave long before it
CHUNKS, GAP = 40, 0.4  # 16 s sequences: longer than the preStop's 10 s propagation wait
LANES = 6


def test_scale_down_keeps_stream_sequences_whole_and_the_pod_leaves_when_they_end(
    cluster: Cluster, chart_operator: dict[str, Any]
) -> None:
    doc = stream_pipeline(cluster, NAME, DRAIN_S)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    try:
        wait("2 pods Ready", lambda: condition(cluster, NAME, "Ready").get("status") == "True"
             and len(pods(cluster, NAME)) == 2, 240, lambda: diagnostics(cluster, NAMESPACE))  # fmt: skip
        load = start_streams(cluster, NAME, LANES, CHUNKS, GAP)
        try:
            time.sleep(CHUNKS * GAP / 2)  # sequences open on both pods
            cluster.kubectl("patch", "tritonpipeline", NAME, "-n", NAMESPACE, "--type", "merge",
                            "-p", json.dumps({"spec": {"server": {"replicas": 1}}}))  # fmt: skip
            t0 = time.monotonic()
            wait("the leaving pod gone", lambda: len(pods(cluster, NAME)) == 1, DRAIN_S + 60,
                 lambda: diagnostics(cluster, NAMESPACE))  # fmt: skip
            gone_s = time.monotonic() - t0
        finally:
            load.send_signal(signal.SIGTERM)
            out, _ = load.communicate(timeout=120)
    finally:
        cluster.kubectl("delete", "tritonpipeline", NAME, "-n", NAMESPACE, "--wait=false", check=False)
    records, broken = stream_results(out)
    print(f">> {len(records)} sequences, {len(broken)} broken; the leaving pod was gone after {gone_s:.1f}s")
    assert len(records) >= 2 * LANES and not broken, broken[:3]
    # it waited for the streams open on it (the 10 s propagation wait, then up to one sequence more) and
    # left once they ended, far from the cap
    assert PRE_STOP_SECONDS <= gone_s < PRE_STOP_SECONDS + CHUNKS * GAP + 30 < DRAIN_S, gone_s
