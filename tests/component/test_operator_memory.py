"""The operator's memory does not grow with objects it does not manage: its watches of child kinds ask
the apiserver for its own children only (a label selector on list and watch), so ConfigMaps of other
applications never reach the process. Real kube-apiserver, the operator as a cluster-wide subprocess.
Here the tests on real components; the pure ones are in tests/unit/test_operator_memory.py."""

from __future__ import annotations

import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from component.test_operator import (
    get_cr,
    operator_log_on_failure,
    patch_deployment_status,
    private_cluster,
    wait_reconciled,
)
from harness.operator_process import OperatorProcess
from harness.wait import wait_for
from helpers import CLI, cluster_doc, condition
from tritonpipeline.kube.api_client import Kube

PEAK_RSS_LIMIT_MB = 150.0  # the chart's operator memory limit leaves room above this (MB = 10^6 bytes)


UNRELATED_CONFIGMAPS = 300


PAYLOAD_BYTES = 500 * 1024


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def create_unrelated_configmaps(kube: Kube, namespace: str) -> None:
    """UNRELATED_CONFIGMAPS ConfigMaps of PAYLOAD_BYTES each, as another application would keep."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    blob = secrets.token_hex(PAYLOAD_BYTES // 2)

    def create(i: int) -> None:
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"other-{i}", "namespace": namespace, "labels": {"app": "other"}},
                "data": {"blob": blob},
            }
        )

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, range(UNRELATED_CONFIGMAPS)))


@pytest.mark.apiserver
def test_unrelated_configmaps_do_not_reach_the_operator(control_plane: Any, tmp_path: Path) -> None:
    """300 unrelated 500 KB ConfigMaps in another namespace: the cluster-wide operator reconciles a
    pipeline, restores a deleted child and mirrors its Deployment through its watches, and its peak RSS
    stays under PEAK_RSS_LIMIT_MB (kopf's client-side `labels=` filter alone read all 150 MB)."""
    with private_cluster(control_plane.binaries, tmp_path, "memory") as (cp, k):
        create_unrelated_configmaps(k, "unrelated")
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "TRITONPIPELINE_RESYNC_SECONDS": "3600"}
        op = OperatorProcess([str(CLI), "run"], env, tmp_path / "operator.log").start()
        with operator_log_on_failure(op):
            k.apply(cluster_doc("vision", "memory"))
            wait_reconciled(k, "memory", "vision")
            # the child watches still see the operator's own children: a deleted one comes back at once
            # (the resync, which would also restore it, is an hour away) ...
            k.delete("v1", "Service", "memory", "vision")
            wait_for("the Service to come back", lambda: k.get("v1", "Service", "memory", "vision"))
            # ... and the Deployment's status is mirrored into the pipeline's
            status = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}
            patch_deployment_status(k, "memory", "vision", status)

            def ready() -> dict[str, Any] | None:
                c = condition(get_cr(k, "memory", "vision"), "Ready")
                return c if c and c["status"] == "True" else None

            wait_for("Ready=True", ready)
            # the ConfigMap watch lists before it watches, so a restored ConfigMap also means the operator
            # has read whatever its ConfigMap list returned (all 150 MB of them without a label selector)
            (generated,) = k.list("v1", "ConfigMap", "memory", "serving.tritonpipeline.io/pipeline=vision")
            name = generated["metadata"]["name"]
            k.delete("v1", "ConfigMap", "memory", name)
            wait_for(
                "the ConfigMap to come back", lambda: k.get("v1", "ConfigMap", "memory", name), timeout=120
            )
            assert op.proc is not None and op.alive()
            peak = peak_rss_mb(op.proc.pid)
            print(f"operator peak RSS {peak:.0f} MB with {UNRELATED_CONFIGMAPS} unrelated ConfigMaps")
            assert peak < PEAK_RSS_LIMIT_MB, f"peak RSS {peak:.0f} MB (limit {PEAK_RSS_LIMIT_MB:.0f} MB)"
