"""The operator outlives the apiserver going away: its loops (drift repair, status poll, leadership, webhook
certificate) survive every error with backoff and a log line, liveness fails when a loop has not completed a
pass within its bound, and a metric per loop gives its last completed pass (runtime/loops.py). Real operator
processes against a private real kube-apiserver + etcd that the tests stop, start or pause; the supervisor and
the client's error mapping also on their own (pure asyncio, and real sockets that refuse or cut a connection).
Here the tests on real components; the pure ones are in tests/unit/test_operator_outage.py."""

from __future__ import annotations

import re
import time

import pytest

from component.test_operator import operator_log_on_failure, private_cluster, wait_reconciled
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import cluster_doc
from tritonpipeline.kube.api_client import Kube

NAMESPACE = "outage"


RESYNC = 5.0  # seconds between drift repairs in the outage scenario


LAST_PASS = re.compile(
    r'^tritonpipeline_operator_loop_last_pass_timestamp_seconds\{loop="(\S+?)"\} (\S+)$', re.M
)


def last_passes(op: LocalOperator) -> dict[str, float]:
    """Each loop's last completed pass (unix time), from the operator's /metrics."""
    status, text = op.get("/metrics")
    return {m.group(1): float(m.group(2)) for m in LAST_PASS.finditer(text)} if status == 200 else {}


def selector(kube: Kube, name: str) -> dict[str, str]:
    service = kube.get("v1", "Service", NAMESPACE, name) or {}
    return dict(service.get("spec", {}).get("selector") or {})


def hand_edit_selector(kube: Kube, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """`kubectl edit` of the generated Service's selector (another field manager takes one of its keys): the
    selector before and after."""
    before = selector(kube, name)
    key = sorted(before)[0]
    url = f"/api/v1/namespaces/{NAMESPACE}/services/{name}"
    patch = {"spec": {"selector": {key: "someone-elses-pods"}}}
    kube.request(
        "PATCH", url, query=[("fieldManager", "kubectl-edit")], body=patch,
        content_type="application/merge-patch+json",
    )  # fmt: skip
    after = selector(kube, name)
    assert after != before, after
    return before, after


# ------------------------------------------------------------------------------ an apiserver outage


@pytest.mark.apiserver
def test_drift_after_an_apiserver_outage_is_repaired_within_one_resync(control_plane, tmp_path):
    """The apiserver is stopped for 25 s and started again (same etcd data, same port): the resync loop
    logs each failed pass with its retry, and a hand edit made after the outage is undone within one resync
    period (the loops had ended silently on a refused connection: urllib3's MaxRetryError is no OSError)."""
    with private_cluster(control_plane.binaries, tmp_path, NAMESPACE) as (cp, kube):
        env = {"TRITONPIPELINE_RESYNC_SECONDS": str(RESYNC), "TRITONPIPELINE_STATUS_POLL_SECONDS": "5"}
        op = LocalOperator(cp.kubeconfig, NAMESPACE, tmp_path / "operator.log", env=env, endpoints=True)
        op.start()
        with operator_log_on_failure(op):
            kube.apply(cluster_doc("vision", NAMESPACE))
            wait_reconciled(kube, NAMESPACE, "vision")
            rendered, _ = hand_edit_selector(kube, "vision")
            started = time.monotonic()
            wait_for("the edit undone", lambda: selector(kube, "vision") == rendered, timeout=3 * RESYNC)
            before_outage = time.monotonic() - started

            cp.stop()
            time.sleep(25)
            cp.start()
            kube = Kube(cp.api_client(), "test-admin")  # the old client's pooled connections are gone
            hand_edit_selector(kube, "vision")
            edited_at = time.monotonic()
            wait_for("the edit undone", lambda: selector(kube, "vision") == rendered, timeout=6 * RESYNC)
            after_outage = time.monotonic() - edited_at
            print(
                f"\ndrift undone in {before_outage:.1f}s before the outage, in {after_outage:.1f}s after it"
            )
            assert after_outage <= RESYNC + 5, after_outage  # one resync period, and the pass itself

            failed = [line for line in op.lines() if "resync failed" in line and "retrying in" in line]
            assert failed, "no line said the resync failed and when it retries"
            assert "HTTP 0" in failed[0] and "Connection refused" in "".join(failed), failed[0]
            wait_for(
                "the line that says so",
                lambda: "resync: passes complete again after" in op.text(),
                2 * RESYNC,
            )
            assert not [line for line in op.lines() if "urllib3" in line]  # one line per failed pass, ours
            resumed = time.time()
            wait_for(
                "the resync and status poll passes recorded again",
                lambda: all(last_passes(op).get(loop, 0) > resumed for loop in ("resync", "status-poll")),
                timeout=3 * RESYNC,
            )
            assert op.healthz() == 200 and op.alive()


@pytest.mark.apiserver
def test_liveness_fails_while_a_loop_is_stuck_and_recovers(control_plane, tmp_path):
    """The apiserver hangs (SIGSTOP: connections are accepted and never answered) while the watches' own
    bound is far off: the resync loop hangs in a pass, and /healthz and /readyz fail naming it once its
    bound (three periods plus TRITONPIPELINE_LOOP_STALE_MARGIN_SECONDS) is over; continued, both recover."""
    with private_cluster(control_plane.binaries, tmp_path, NAMESPACE) as (cp, _):
        env = {
            "TRITONPIPELINE_RESYNC_SECONDS": "1",
            "TRITONPIPELINE_STATUS_POLL_SECONDS": "0",  # the resync loop alone
            "TRITONPIPELINE_LOOP_STALE_MARGIN_SECONDS": "4",  # its bound: 3 x 1 s + 4 s
            "TRITONPIPELINE_WATCH_STALE_SECONDS": "600",  # the watches' liveness does not trip in this test
        }
        op = LocalOperator(cp.kubeconfig, NAMESPACE, tmp_path / "operator.log", env=env, endpoints=True)
        op.start()
        with operator_log_on_failure(op):
            wait_for("liveness 200", lambda: op.healthz() == 200, timeout=60)
            wait_for("a resync pass", lambda: "resync" in last_passes(op), timeout=30)
            with cp.paused():
                paused = time.monotonic()
                wait_for("liveness failing", lambda: op.healthz() == 500, timeout=60, interval=0.5)
                failing = time.monotonic() - paused
                assert op.alive()
                ready, reason = op.get("/readyz")
                stalled = op.get("/metrics")[1]  # the gauge the TritonPipelineOperatorLoopStalled alert reads
            print(f"\nliveness failed {failing:.1f}s after the apiserver hung (bound 7 s, kopf caches 10 s)")
            assert ready == 503 and "loop resync has not completed a pass for" in reason, reason
            assert "(limit 7s)" in reason, reason
            assert 'tritonpipeline_operator_loop_stalled{loop="resync"} 1.0' in stalled
            # not before the bound (which counts from the last pass: up to a period before the pause)
            assert failing >= 7 - 2, failing
            wait_for("liveness back", lambda: op.healthz() == 200, timeout=90, interval=1)
            assert op.get("/readyz")[0] == 200
            assert 'tritonpipeline_operator_loop_stalled{loop="resync"} 0.0' in op.get("/metrics")[1]
