"""The status users act on (render/triton_metrics.py, reconcile/live.py): per step queue and compute time
and per branch traffic from a real tritonserver's /metrics after real requests, and the autoscaler's
replicas copied by the operator from an HPA status written through the real apiserver.
Here the tests on real components; the pure ones are in tests/unit/test_status_live.py."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from component.test_operator import get_cr, wait_reconciled
from harness.kubeapi import write_status
from harness.wait import wait_for
from helpers import ROUTERS, cluster_doc, compile_to_serve, example, images_at_once, speculative, with_router
from support.status_live import stream_doc
from tritonpipeline.client import SequenceStream
from tritonpipeline.compiler import (
    OPEN_STREAMS_MODEL,
    compile_pipeline,
)
from tritonpipeline.render import triton_metrics as tm
from tritonpipeline.spec import parse_pipeline

REQUESTS = 20


def scrape(server: Any) -> tm.Scrape:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        text = response.read().decode()
    return tm.read_scrape(text, time.monotonic())


def send(server: Any, n: int) -> float:
    """n sequential requests through the fan-out pipeline; the mean client-side latency in µs."""
    client = httpclient.InferenceServerClient(server.http_url)
    started = time.perf_counter()
    for i in range(n):
        image = httpclient.InferInput("IMAGE", [1, 4], "FP32")
        image.set_data_from_numpy(np.full((1, 4), i, dtype=np.float32))
        client.infer("vision", [image])
    client.close()
    return (time.perf_counter() - started) / n * 1e6


@pytest.mark.tritonserver
def test_steps_from_real_triton_metrics(serve_pipeline):
    doc = example("fanout")
    tp = parse_pipeline(doc)
    routers = [r["name"] for r in compile_pipeline(tp, cpu_only=True).graph_summary()["routers"]]
    assert routers, "the fan-out example has an inserted router"
    server = serve_pipeline(doc)
    first = scrape(server)
    latency_us = send(server, REQUESTS)
    second = scrape(server)
    idle = scrape(server)

    # every model the server ran counts our requests, the inserted router and the ensemble too
    for model in ("extractor", "head_b", "head_c", "vision", *routers):
        assert second.models[model].requests - first.models.get(model, tm.ModelTotals()).requests == REQUESTS

    status = tm.steps_status(tp, tm.pipeline_work([(first, second)]))
    print(f"\nmean client latency {latency_us:.0f} us; {status}")
    # only the user's steps: no router, no ensemble
    assert [(s["pipeline"], s["step"], s["model"]) for s in status["steps"]] == [
        ("vision", "extract", "extractor"),
        ("vision", "head_b", "head_b"),
        ("vision", "head_c", "head_c"),
    ]
    rate = round(REQUESTS / (second.at - first.at), 2)
    for step in status["steps"]:
        assert step["requestsPerSecond"] == rate
        assert step["computeUs"] > 0 and step["queueUs"] >= 0
        # a step's time per request is part of what the client waited for each request
        assert step["queueUs"] + step["computeUs"] < latency_us
    slowest = max(status["steps"], key=lambda s: s["queueUs"] + s["computeUs"])
    assert status["bottleneck"] == f"vision/{slowest['step']}"

    # two pods with the same work: rates add up, averages per request stay
    both = tm.steps_status(tp, tm.pipeline_work([(first, second), (first, second)]))
    for one, two in zip(status["steps"], both["steps"], strict=True):
        # each rate is rounded to 0.01: twice a rounded rate and the rounded double differ by up to 0.01
        # (seen: 393.71 against 2 x 196.86), and 0.01 itself is not exact in binary
        assert two["requestsPerSecond"] == pytest.approx(2 * one["requestsPerSecond"], abs=0.015)
        assert (two["queueUs"], two["computeUs"]) == (one["queueUs"], one["computeUs"])

    # no request in the interval: no times (left out, not zeros), rate 0, no bottleneck
    quiet = tm.steps_status(tp, tm.pipeline_work([(second, idle)]))
    assert quiet["bottleneck"] is None
    assert all("queueUs" not in s and "computeUs" not in s for s in quiet["steps"])
    assert all(s["requestsPerSecond"] == 0 for s in quiet["steps"])

    # a server restart (counters went down): the work is what the new server did
    assert tm.difference(second, first) == first.models


def hpa_status(current: int, desired: int) -> dict[str, Any]:
    return {"currentReplicas": current, "desiredReplicas": desired, "currentMetrics": None}


@pytest.mark.apiserver
def test_operator_copies_the_autoscalers_replicas(kube, namespace, run_operator):
    """No HPA controller runs on the bare control plane: the test writes the HPA's status as it would,
    for our HPA (engine auto without KEDA: hpa) and for the one KEDA makes (keda-hpa-NAME, engine
    keda); status.autoscaler names the engine."""
    name = "scaled"
    doc = cluster_doc(name, namespace)
    doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 5, "metric": "queueTime", "target": 50}
    run_operator({"TRITONPIPELINE_STATUS_POLL_SECONDS": "0.5"})
    kube.apply(doc)
    wait_reconciled(kube, namespace, name)

    def autoscaler() -> Any:
        return (get_cr(kube, namespace, name).get("status") or {}).get("autoscaler")

    # no Ready pod to read (no kubelet here): every step is listed, without numbers (not zeros)
    steps = wait_for("status.steps", lambda: (get_cr(kube, namespace, name).get("status") or {}).get("steps"))
    assert [(s["pipeline"], s["step"]) for s in steps] == [
        ("vision", "extract"),
        ("vision", "head_b"),
        ("vision", "head_c"),
    ]
    assert all(set(s) == {"pipeline", "step", "model"} for s in steps), steps

    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"}
    wait_for("the HPA", lambda: kube.get(hpa["apiVersion"], hpa["kind"], namespace, name))
    write_status(kube, {**hpa, "metadata": {"namespace": namespace, "name": name}}, hpa_status(2, 4))
    want = {"currentReplicas": 2, "desiredReplicas": 4, "metric": "queueTime", "target": 50, "engine": "hpa"}
    wait_for("status.autoscaler from the HPA", lambda: autoscaler() == want, timeout=20)

    # engine keda: KEDA's own HPA (made here, as KEDA would), not ours
    keda_name = f"keda-hpa-{name}"
    kube.apply(
        {
            **hpa,
            "metadata": {"namespace": namespace, "name": keda_name},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 1,
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {"name": "s0-prometheus"},
                            "target": {"type": "Value", "value": "50"},
                        },
                    }
                ],
            },
        }
    )
    write_status(kube, {**hpa, "metadata": {"namespace": namespace, "name": keda_name}}, hpa_status(3, 1))
    doc["spec"]["autoscaling"]["engine"] = "keda"
    kube.apply(doc)
    want = {"currentReplicas": 3, "desiredReplicas": 1, "metric": "queueTime", "target": 50, "engine": "keda"}
    wait_for("status.autoscaler from KEDA's HPA", lambda: autoscaler() == want, timeout=20)

    # autoscaling removed: no autoscaler in status
    del doc["spec"]["autoscaling"]
    kube.apply(doc)
    wait_for("status.autoscaler gone", lambda: autoscaler() is None, timeout=20)


async def open_sequence(server: Any, sequence_id: int) -> SequenceStream:
    """A SequenceStream (its own gRPC stream on its own connection, registered with the open-streams
    model) with its sequence started and left open."""
    seq = SequenceStream(server.grpc_url, "streaming", sequence_id=sequence_id)
    await seq.send([seq.input("CHUNK", np.array([[sequence_id]], dtype=np.int32))])
    return seq


def stub_rss_kib(server: Any, model: str) -> int:
    """Resident memory of the Python-backend stub process that runs `model` (a child of tritonserver)."""
    for child in Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split():
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
        if model in cmdline:
            status = Path(f"/proc/{child}/status").read_text()
            return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]
    raise AssertionError(f"no stub process runs {model}")


@pytest.mark.tritonserver
def test_open_sequences_counted_on_a_real_stream_pipeline(serve_pipeline):
    """The gauge counts the client helper's streams; a plain gRPC connection next to them counts for
    nothing (tests/component/test_stream_leases.py has the rest)."""
    tp = parse_pipeline(stream_doc())
    server = serve_pipeline(stream_doc())

    def gauge() -> int | None:
        with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
            return tm.read_scrape(response.read().decode(), 0).open_streams

    async def until(what: str, fn: Any) -> None:
        await asyncio.to_thread(wait_for, what, fn, 10)

    async def run() -> None:
        assert gauge() == 0
        idle = grpcclient.InferenceServerClient(server.grpc_url)
        assert idle.is_server_live()
        streams = [await open_sequence(server, sequence_id) for sequence_id in (11, 12, 13)]
        try:
            await until("3 open sequences on the gauge", lambda: gauge() == 3)
            await streams.pop().close()  # one sequence's client goes away
            await until("2 open sequences", lambda: gauge() == 2)
            status = tm.open_sequences_status(tp, {"vision-0": scrape(server), "vision-1": None})
            assert status == [{"pod": "vision-0", "openSequences": 2}, {"pod": "vision-1"}]
        finally:
            for seq in streams:
                await seq.close()
            idle.close()
        await until("no open sequence", lambda: gauge() == 0)

    asyncio.run(run())
    rss = stub_rss_kib(server, OPEN_STREAMS_MODEL)
    print(f"\nopen-streams stub process: {rss / 1024:.1f} MiB resident")
    assert rss < 64 * 1024  # the budget docs/how-to/status.md states


@contextlib.contextmanager
def pod_triton(doc: dict[str, Any], tmp_path: Path, pod_ip: str) -> Iterator[Any]:
    """A real tritonserver serving the compiled doc with its metrics at `pod_ip` port 8002, where the
    operator reads a pod's (skipped when that port is taken)."""
    from tritonpipeline.local.repository import write_repository
    from tritonpipeline.local.tritonserver import LocalTriton
    from tritonpipeline.render.meta import METRICS_PORT

    with socket.socket(socket.AF_INET6 if ":" in pod_ip else socket.AF_INET) as probe:
        if probe.connect_ex((pod_ip, METRICS_PORT)) == 0:
            pytest.skip(f"{pod_ip} port {METRICS_PORT} is in use (the pod's metrics port must be that one)")
    artifacts = compile_to_serve(doc)  # its routers (and a switch) as spec.server.router says
    repo = write_repository(artifacts, tmp_path / "repo", Path(doc["spec"]["modelRepository"]["uri"]))
    server = LocalTriton(repo, host=pod_ip, metrics_port=METRICS_PORT, log_file=tmp_path / "triton.log")
    server.start()
    try:
        server.wait_ready(timeout=120)
        yield server
    finally:
        server.stop(timeout=15)


def ready_pod(kube: Any, namespace: str, name: str, pod_ip: str) -> None:
    """Pod NAME-0 of the pipeline's Deployment, Ready at `pod_ip` (its status written as the kubelet would:
    no kubelet runs on the bare control plane)."""
    from tritonpipeline.render.meta import PIPELINE_LABEL

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": f"{name}-0"}}
    deployment = kube.get("apps/v1", "Deployment", namespace, name)
    assert deployment is not None
    labels = deployment["spec"]["template"]["metadata"]["labels"]  # what its ReplicaSet gives a pod
    assert labels[PIPELINE_LABEL] == name
    kube.create(
        {
            **pod,
            "metadata": {**pod["metadata"], "labels": labels},
            "spec": {"containers": [{"name": "triton", "image": "triton"}]},
        }
    )
    ready = [{"type": "Ready", "status": "True"}]
    write_status(kube, pod, {"phase": "Running", "podIP": pod_ip, "conditions": ready})


@pytest.mark.apiserver
@pytest.mark.tritonserver
@pytest.mark.parametrize("pod_ip", ["127.0.0.1", "::1"], ids=["ipv4", "ipv6"])
def test_operator_reads_a_ready_pods_triton_metrics_into_status(
    kube, namespace, run_operator, tmp_path, pod_ip
):
    """The operator's whole poll: it lists the pipeline's pods on the real apiserver, reads a Ready pod's
    Triton /metrics at its pod IP on port 8002 (here a real tritonserver on 127.0.0.1:8002, or [::1]:8002
    as on an IPv6 pod network, the pod object's status written as the kubelet would) and writes
    status.steps and status.bottleneck."""
    name = "observed"
    with pod_triton(example("fanout"), tmp_path, pod_ip) as server:
        op = run_operator({"TRITONPIPELINE_STATUS_POLL_SECONDS": "0.5"})
        kube.apply(cluster_doc(name, namespace))
        wait_reconciled(kube, namespace, name)
        ready_pod(kube, namespace, name, pod_ip)

        measured: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not measured:
            send(server, 5)
            current = get_cr(kube, namespace, name).get("status") or {}
            if current.get("steps") and all("computeUs" in s for s in current["steps"]):
                measured, bottleneck = current["steps"], current.get("bottleneck")
        assert [s["step"] for s in measured] == ["extract", "head_b", "head_c"]
        assert all(s["computeUs"] > 0 and s["requestsPerSecond"] > 0 for s in measured), measured
        assert bottleneck in {f"vision/{s['step']}" for s in measured}
        assert "branchTraffic" not in get_cr(kube, namespace, name)["status"]  # no conditions
    # the pod stops answering: polls go on, and the operator says so once (not on every poll)
    warning = "status poll: cannot read Triton metrics of pod observed-0"
    wait_for("the scrape warning", lambda: warning in op.text(), timeout=20)
    time.sleep(3)  # several more polls
    assert op.text().count(warning) == 1 and op.alive()


SMALL = np.array([[-1.0, -2.0, 0.5, 0.25]], dtype=np.float32)  # label 0 (examples/conditional.yaml)
LARGE = np.array([[1.0, 2.0, -0.5, 0.25]], dtype=np.float32)  # label 1


@pytest.mark.apiserver
@pytest.mark.tritonserver
@pytest.mark.parametrize("mode", [*ROUTERS, "speculative"])
def test_operator_counts_each_branchs_traffic_into_status(kube, namespace, run_operator, tmp_path, mode):
    """examples/conditional.yaml served by a real tritonserver as a Ready pod's: after real requests, each
    pipeline's status.branchTraffic counts the inferences each branch took (Triton's own counters of the
    branch ensembles), by the condition and steps the spec gives, the pipeline's, and those that took no
    branch; a request of two batch items is two inferences. Idle polls leave the numbers as they are. On
    both backends: the Python orchestrator, and the native switch in the pipeline's ensemble; and with
    `speculative: true`, where every branch runs for every request and no branch ensemble is called (the
    switch counts the requests taking each: native_router.c, TAKEN_METRIC)."""
    name = f"branching-{mode}"
    router = "native" if mode == "speculative" else mode

    def no_label_small(doc: dict[str, Any]) -> dict[str, Any]:
        """The `conditional` pipeline's small branch on a label the classifier never gives: its requests
        take no branch (they are answered all the same: RESULT left out, SMALL its default)."""
        doc["spec"]["pipelines"][0]["steps"][1]["when"] = {"tensor": "classify.LABEL", "equals": 7}
        return with_router(speculative(doc, mode == "speculative"), router)

    served = no_label_small(example("conditional"))
    with pod_triton(served, tmp_path, "127.0.0.1") as server:
        run_operator({"TRITONPIPELINE_STATUS_POLL_SECONDS": "0.5"})
        kube.apply(no_label_small(cluster_doc(name, namespace, "conditional")))
        wait_reconciled(kube, namespace, name)

        def traffic() -> list[dict[str, Any]]:
            return (get_cr(kube, namespace, name).get("status") or {}).get("branchTraffic") or []

        # no Ready pod yet: every branch listed by its condition, without numbers
        unread = wait_for("status.branchTraffic", traffic)
        assert [(t["pipeline"], [b["condition"] for b in t["branches"]]) for t in unread] == [
            ("conditional", ["classify.LABEL equals 7", "classify.LABEL equals 1"]),
            ("switched", ["no case of the switch on classify.LABEL holds", "classify.LABEL equals 1"]),
        ]
        assert all("inferences" not in b for t in unread for b in t["branches"])

        ready_pod(kube, namespace, name, "127.0.0.1")
        images_at_once(server.grpc_url, "conditional", [SMALL * (k + 1) for k in range(5)] + [LARGE] * 3)
        images_at_once(
            server.grpc_url, "conditional", [np.concatenate([LARGE, LARGE])]
        )  # one request, two items
        images_at_once(server.grpc_url, "switched", [SMALL, LARGE, LARGE, LARGE])

        def counted() -> Any:
            found = {
                t["pipeline"]: (
                    t.get("inferences"),
                    t.get("noBranch"),
                    [(b["steps"], b.get("inferences")) for b in t["branches"]],
                )
                for t in traffic()
            }
            return found if found.get("switched", (None,))[0] == 4 else None

        assert wait_for("branch traffic counted", counted, timeout=30) == {
            "conditional": (10, 5, [(["small"], 0), (["large", "score"], 5)]),  # label 0: no branch
            "switched": (4, 0, [(["small"], 1), (["large"], 3)]),
        }
        # idle: the rates fall to 0 once, then the status stays as written
        wait_for(
            "idle rates",
            lambda: all(b.get("inferencesPerSecond") == 0 for t in traffic() for b in t["branches"]),
        )
        settled = get_cr(kube, namespace, name)["status"]["branchTraffic"]
        print(f"\nstatus.branchTraffic: {settled}")
        time.sleep(2)  # several more polls
        assert get_cr(kube, namespace, name)["status"]["branchTraffic"] == settled
