"""High availability: several operator replicas on kopf's peering, the oldest live one reconciling
(render/peering.py, reconcile/leadership.py). Real operator processes against the real kube-apiserver, on
the chart's copy of kopf's peering CRDs and a KopfPeering in the watched namespace (what the chart
creates with watchNamespaces); killed with SIGKILL or stopped with SIGINT as a pod would be."""

from __future__ import annotations

import datetime
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from component.test_operator import wait_reconciled
from harness.kubeapi import wait_established
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import ROOT, cluster_doc
from tritonpipeline.kube.api_client import Kube

pytestmark = pytest.mark.apiserver

PEERING_CRDS = ROOT / "charts" / "triton-pipeline" / "crds" / "kopfpeerings.kopf.dev.yaml"
PEERING = "tp-ha"
LIFETIME = 6  # seconds: kopf then renews each entry every second (max(1, lifetime - 5..10))
CHECK_SECONDS = 3  # reconcile/leadership.py: how often a replica reads the peering object
LOOP_STALE_MARGIN = 5
LAST_PASS = re.compile(r'^tritonpipeline_operator_loop_last_pass_timestamp_seconds\{loop="(\S+?)"\} ', re.M)
ACTIVE = re.compile(r"^tritonpipeline_operator_active (\S+)$", re.M)
LINE_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")


def install_peering_crds(kube: Kube) -> None:
    """kopf's two peering CRDs from the chart, applied server-side (idempotent: the control plane is the
    session's, and a chart test's `helm install` may have created the same ones) and established. Left in
    place: cluster-scoped and shared, and they change nothing for an operator started without peering."""
    for doc in yaml.safe_load_all(PEERING_CRDS.read_text()):
        if doc:
            kube.apply(doc)
            wait_established(kube, doc["metadata"]["name"])


def peering_in(kube: Kube, namespace: str) -> None:
    """kopf's peering CRDs (`install_peering_crds`) and the KopfPeering PEERING in `namespace`, which the
    replicas of `replica_env` take part in (what the chart creates with watchNamespaces)."""
    install_peering_crds(kube)
    meta = {"name": PEERING, "namespace": namespace}
    kube.apply({"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": meta})


def peering_status(kube: Kube, namespace: str) -> dict[str, Any]:
    obj = kube.get("kopf.dev/v1", "KopfPeering", namespace, PEERING)
    assert obj is not None
    return dict(obj.get("status") or {})


class ActiveSampler:
    """Reads `tritonpipeline_operator_active` from every replica's /metrics, newest replica first, every
    0.1 s in a thread: (monotonic time, {identity: value}) per round; a replica that does not answer
    (killed, stopped) counts 0. Newest first: the role only ever passes to a newer replica, so a round
    that finds two at 1 saw the older one still claim it after the newer one had."""

    def __init__(self) -> None:
        self.replicas: list[tuple[str, LocalOperator]] = []
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="active-sampler", daemon=True)

    def add(self, identity: str, op: LocalOperator) -> None:
        self.replicas = [*self.replicas, (identity, op)]

    def _read(self, op: LocalOperator) -> int:
        if not op.alive():
            return 0
        status, body = op.get("/metrics")
        found = ACTIVE.search(body) if status == 200 else None
        return int(float(found.group(1))) if found else 0

    def _run(self) -> None:
        while not self._stop.is_set():
            values = {identity: self._read(op) for identity, op in reversed(self.replicas)}
            self.samples.append((time.monotonic(), values))
            self._stop.wait(0.1)

    def first(self, identity: str, since: float) -> float | None:
        """When `identity` was first seen active at or after `since`."""
        return next((t for t, v in list(self.samples) if t >= since and v.get(identity) == 1), None)

    def active(self, identity: str) -> bool:
        samples = list(self.samples)
        return bool(samples) and samples[-1][1].get(identity) == 1

    def __enter__(self) -> ActiveSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def reconcile_times(op: LocalOperator, namespace: str, name: str) -> list[datetime.datetime]:
    """The time of each reconcile line of the pipeline in the replica's log (one per reconcile:
    `[ns/name] reconcile <outcome> (generation N): ...`, reconcile/pipeline.py)."""
    found = []
    for line in op.lines():
        if f"[{namespace}/{name}] reconcile " in line and (m := LINE_TIME.match(line)):
            found.append(datetime.datetime.fromisoformat(m.group(1)))
    return found


def logged(op: LocalOperator, text: str) -> Callable[[], bool]:
    return lambda: text in op.text()


def logged_reconcile(op: LocalOperator, generation: int) -> Callable[[], bool]:
    """Whether the replica logged a reconcile's outcome line for `generation`. Waited for: the status is
    written before that line, and under load a test reads the status first."""
    return lambda: any("reconcile" in line and f"(generation {generation})" in line for line in op.lines())


def logged_at(op: LocalOperator, text: str) -> datetime.datetime | None:
    """The time of the replica's first log line with `text` (UTC, naive)."""
    for line in op.lines():
        if text in line and (m := LINE_TIME.match(line)):
            return datetime.datetime.fromisoformat(m.group(1))
    return None


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def replica_env(identity: str) -> dict[str, str]:
    """The environment of replica `identity` in the peering PEERING (kopf's, with a short lifetime)."""
    return {
        "TRITONPIPELINE_PEERING": PEERING,
        "TRITONPIPELINE_PEERING_LIFETIME_SECONDS": str(LIFETIME),
        "TRITONPIPELINE_RESYNC_SECONDS": "2",  # a standby that resyncs would show it at once
        "TRITONPIPELINE_DISCOVERY_SECONDS": "2",  # likewise for the discovery loop
        # liveness fails when a loop completed no pass for 3 periods + this: 11 s for the resync,
        # which a standby does not run (and must not fail on)
        "TRITONPIPELINE_LOOP_STALE_MARGIN_SECONDS": str(LOOP_STALE_MARGIN),
        "POD_ID": identity,
    }


KOPF_RESUMED = "Resuming operations after the pause"  # kopf's peering: no live peer outranks it any more


@pytest.fixture
def replicas(
    control_plane: Any, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[str], LocalOperator]]:
    """start(identity) -> a running operator replica in the peering; each stopped afterwards (SIGINT,
    then SIGKILL), by its own process; their logs printed when the test failed."""
    started: list[LocalOperator] = []

    def start(identity: str) -> LocalOperator:
        log, env = tmp_path / f"{identity}.log", replica_env(identity)
        op = LocalOperator(control_plane.kubeconfig, namespace, log, env=env, endpoints=True)
        started.append(op)
        return op.start()

    try:
        yield start
    finally:
        for op in started:
            op.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for op in started:
                print(f"\n===== {op.log.name} =====\n{op.text()[-6000:]}")


@contextmanager
def timed(what: str, measured: dict[str, float]) -> Iterator[None]:
    start = time.monotonic()
    yield
    measured[what] = time.monotonic() - start


def test_the_oldest_replica_reconciles_and_a_standby_takes_over_when_it_dies_or_stops(
    kube, namespace, replicas
) -> None:
    peering_in(kube, namespace)
    measured: dict[str, float] = {}
    with ActiveSampler() as sampler:
        # --- two replicas: the first one started reconciles, the other waits ------------------------------
        a = replicas("replica-a")
        sampler.add("replica-a", a)
        wait_for("replica-a active", logged(a, "replica replica-a is now the active reconciler"), 60)
        b = replicas("replica-b")
        b_started = time.monotonic()
        sampler.add("replica-b", b)
        wait_for("replica-b standby", logged(b, "replica replica-b is standby"), 60)
        assert "active: replica-a" in b.text()
        # a replica may decide it is standby (it sees the older peer) before its own keep-alive entry is
        # written: both entries appear within a keep-alive round
        both = {"replica-a", "replica-b"}
        status = wait_for(
            "both replicas in the peering status",
            lambda: found if set(found := peering_status(kube, namespace)) == both else None,
            30,
        )
        assert status["replica-a"]["priority"] > status["replica-b"]["priority"]
        assert status["replica-a"]["lifetime"] == LIFETIME

        doc = cluster_doc("vision", namespace)
        kube.apply(doc)
        wait_reconciled(kube, namespace, "vision", 1)
        wait_for("a few resyncs by replica-a", lambda: len(reconcile_times(a, namespace, "vision")) >= 4)
        assert reconcile_times(b, namespace, "vision") == []
        assert sampler.active("replica-a") and not sampler.active("replica-b")
        # the standby is ready and alive on its peering watch alone (its resource watches are closed), and
        # on its leadership loop alone: past the resync's bound it has made no resync pass, and is not judged
        # on it
        time.sleep(max(0.0, b_started + 3 * 2 + LOOP_STALE_MARGIN + 2 - time.monotonic()))
        assert b.get("/readyz") == (200, "ok\n")
        assert b.healthz() == 200
        assert set(LAST_PASS.findall(b.get("/metrics")[1])) == {"leadership"}
        # the active one runs the resync and discovery loops too (no status poll in 30 s yet)
        assert set(LAST_PASS.findall(a.get("/metrics")[1])) == {"leadership", "resync", "discovery"}

        # --- SIGKILL the active one: the standby waits for its entry's lifetime, then takes over ---------
        killed, killed_at = time.monotonic(), utc_now()
        a.kill9()
        measured["kill"] = wait_for("b active", lambda: sampler.first("replica-b", killed), 30) - killed
        # not before the killed replica's entry expires (renewed every second), and soon after it
        assert LIFETIME - 2 <= measured["kill"] <= LIFETIME + 10, measured
        wait_for("b logs it", logged(b, "replica replica-b is now the active reconciler"), 10)
        resumed = logged_at(b, KOPF_RESUMED)  # kopf's own handover (the gauge follows within 3 s)
        assert resumed is not None
        measured["kill_kopf"] = (resumed - killed_at).total_seconds()
        assert LIFETIME - 2 <= measured["kill_kopf"] <= LIFETIME + 2, measured
        wait_for("the dead entry cleaned", lambda: "replica-a" not in peering_status(kube, namespace), 30)
        doc["spec"]["server"]["replicas"] = 2
        kube.apply(doc)
        wait_reconciled(kube, namespace, "vision", 2)
        wait_for("replica-b logs generation 2", logged_reconcile(b, 2), 10)
        assert b.get("/readyz")[0] == 200

        # --- a third replica, then SIGINT the active one: kopf removes its entry, the handover is prompt --
        c = replicas("replica-c")
        sampler.add("replica-c", c)
        wait_for("replica-c standby", logged(c, "replica replica-c is standby"), 60)
        assert "active: replica-b" in c.text()
        time.sleep(2 * CHECK_SECONDS)  # resyncs every 2 s: c would have reconciled by now if it could
        assert reconcile_times(c, namespace, "vision") == []
        stopped = time.monotonic()
        with timed("stop_exit", measured):
            assert b.stop() == 0
        assert "replica-b" not in peering_status(kube, namespace)  # removed by kopf on its way out
        measured["stop"] = wait_for("c active", lambda: sampler.first("replica-c", stopped), 30) - stopped
        # the entry is gone at once: the next check of the peering object (every 3 s) hands over, well
        # before the entry could have expired (renewed every second: >= LIFETIME - 1 after the stop)
        assert measured["stop"] <= CHECK_SECONDS + 1.5, measured
        signalled, resumed = logged_at(b, "Signal SIGINT is received"), logged_at(c, KOPF_RESUMED)
        assert signalled is not None and resumed is not None
        measured["stop_kopf"] = (resumed - signalled).total_seconds()
        assert 0 <= measured["stop_kopf"] <= 1.5, measured
        doc["spec"]["server"]["replicas"] = 3
        kube.apply(doc)
        wait_reconciled(kube, namespace, "vision", 3)
        wait_for("replica-c logs generation 3", logged_reconcile(c, 3), 10)
        time.sleep(1)  # a few more samples with c alone

    # --- never two active at once: by the gauges, and by who wrote reconcile lines when ------------------
    samples = sampler.samples
    assert len(samples) > 100
    worst = max(samples, key=lambda s: sum(s[1].values()))
    assert sum(worst[1].values()) <= 1, f"two replicas active at once: {worst}"
    for identity in ("replica-a", "replica-b", "replica-c"):
        assert any(v.get(identity) == 1 for _, v in samples), f"{identity} never seen active"
    lines = sorted(
        [(t, "a") for t in reconcile_times(a, namespace, "vision")]
        + [(t, "b") for t in reconcile_times(b, namespace, "vision")]
        + [(t, "c") for t in reconcile_times(c, namespace, "vision")]
    )
    order = [who for i, (_, who) in enumerate(lines) if i == 0 or lines[i - 1][1] != who]
    assert order == ["a", "b", "c"], f"reconciles interleaved between replicas: {order}"
    print(
        f"\nhandover after SIGKILL (lifetime {LIFETIME}s): kopf resumed the standby after "
        f"{measured['kill_kopf']:.2f}s, its gauge after {measured['kill']:.2f}s; after SIGINT: kopf after "
        f"{measured['stop_kopf']:.2f}s, the gauge after {measured['stop']:.2f}s (the stopped replica "
        f"exited in {measured['stop_exit']:.2f}s)"
    )
