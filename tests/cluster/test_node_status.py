"""The status users act on, on real pods: the chart's operator reads each Ready Triton pod's /metrics
(port 8002, by pod IP) and writes per step queue and compute time and the bottleneck into the pipeline's
status while a client sends requests through the Service; `kubectl get tp` shows the bottleneck.

Marker `node`: `make e2e`."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from node_cluster import (
    NAMESPACE,
    ROOT,
    Cluster,
    condition,
    diagnostics,
    endpoint,
    fanout,
    models_claim,
    spec_file,
    wait,
)

pytestmark = [pytest.mark.node, pytest.mark.anycluster, pytest.mark.timeout(900)]
NAME = "observed"
POLL_SECONDS = 30  # the chart's operator.statusPollSeconds default


def status(cluster: Cluster) -> dict[str, Any]:
    cr = json.loads(cluster.kubectl("get", "tritonpipeline", NAME, "-n", NAMESPACE, "-o", "json"))
    return cr.get("status") or {}


def test_status_shows_each_steps_time_and_the_bottleneck_under_load(
    cluster: Cluster, chart_operator: dict[str, Any], tmp_path: Path
) -> None:
    doc = fanout(cluster, models_claim(cluster), name=NAME)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    wait(
        "TritonPipeline Ready",
        lambda: condition(cluster, NAME, "Ready").get("status") == "True",
        240,
        lambda: diagnostics(cluster, NAMESPACE),
    )
    # before traffic: the steps are listed, with no times (no request, or fewer than two reads)
    idle = wait("status.steps listed", lambda: status(cluster).get("steps"), 3 * POLL_SECONDS)
    assert [s["step"] for s in idle] == ["extract", "head_b", "head_c"]
    assert all("queueUs" not in s and "computeUs" not in s for s in idle), idle

    url = endpoint(cluster, NAME)
    infer_py = str(ROOT / "e2e" / "infer.py")
    client = cluster.start(
        [sys.executable, infer_py, "--url", url, "--spec", str(spec_file(doc, tmp_path)), "--loop"]
    )
    try:

        def measured() -> dict[str, Any] | None:
            st = status(cluster)
            steps = st.get("steps") or []
            busy = steps and all("computeUs" in s and s.get("requestsPerSecond", 0) > 0 for s in steps)
            return st if busy and st.get("bottleneck") else None

        t = time.monotonic()
        st = wait(
            "status.steps with traffic", measured, 4 * POLL_SECONDS, lambda: diagnostics(cluster, NAMESPACE)
        )
        print(f">> status.steps measured {time.monotonic() - t:.0f}s after the client started: {st['steps']}")
    finally:
        os.kill(client.pid, signal.SIGTERM)
        out, _ = client.communicate(timeout=60)
    print(f">> client: {out.strip().splitlines()[-1:]}")
    slowest = max(st["steps"], key=lambda s: s["queueUs"] + s["computeUs"])
    assert st["bottleneck"] == f"vision/{slowest['step']}"
    table = cluster.kubectl("get", "tp", NAME, "-n", NAMESPACE)
    header, row = table.splitlines()[:2]
    assert "BOTTLENECK" in header.split() and st["bottleneck"] in row.split(), table
    cluster.kubectl("delete", "tritonpipeline", NAME, "-n", NAMESPACE, "--wait=false")
