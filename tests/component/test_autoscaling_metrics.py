"""Autoscaling metrics on real parts: real Prometheus (Debian) scrapes a real tritonserver serving
examples/fanout.yaml while the asyncio client loads it (harness.load.closed_loop), and the
exact queries the operator generates (tritonpipeline.render.autoscaling_objects) are evaluated through
Prometheus's HTTP API.

The scrape target carries the labels Kubernetes service discovery gives a pod (`namespace`, `pod`, the
pod named like a Deployment's), so the generated pod/namespace matchers select it unchanged."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest

from harness.load import LoadResult, closed_loop
from harness.prometheus import Prometheus
from harness.wait import wait_for
from helpers import example
from tritonpipeline.client import AsyncTritonClient
from tritonpipeline.render import autoscaling_objects
from tritonpipeline.spec import parse_pipeline

pytestmark = [pytest.mark.tritonserver, pytest.mark.prometheus]

NAMESPACE = "ml"
POD = "vision-6f7c9d8b5d-k2x4q"  # a Deployment pod name: NAME-<pod-template-hash>-<suffix>
LOAD_SECONDS = 14.0
SETTLED_S = 3.0  # Prometheus here scrapes every 1 s with a 1 s timeout
LOAD_REQUESTS = 60_000  # the bound in count; LOAD_SECONDS is the bound in time


class Load(threading.Thread):
    """closed_loop in its own thread and event loop, so the test can query Prometheus meanwhile."""

    def __init__(self, grpc_url: str) -> None:
        super().__init__(daemon=True)
        self.grpc_url = grpc_url
        self.result: LoadResult | None = None
        self.error: BaseException | None = None

    async def _run(self) -> LoadResult:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        async with AsyncTritonClient(self.grpc_url, protocol="grpc") as client:

            async def call(i: int) -> None:
                result = await client.infer("vision", [client.input("IMAGE", x)])
                np.testing.assert_allclose(result.as_numpy("SCORE_B"), 3 * (2 * x + 1) - 2)

            return await closed_loop(call, concurrency=32, requests=LOAD_REQUESTS, max_seconds=LOAD_SECONDS)

    def run(self) -> None:
        try:
            self.result = asyncio.run(self._run())
        except BaseException as exc:  # reported by the test
            self.error = exc


def adapter_query(metric: str, tp: Any) -> str:
    """The chart's prometheus-adapter rule for `metric`, with the placeholders filled in the way
    prometheus-adapter fills them for an HPA on this pod (namespace + pod matchers, then the HPA's
    metric selector `model NotIn [ensembles]`), grouped by pod."""
    (rule,) = [
        r
        for r in autoscaling_objects.adapter_rules()["rules"]
        if r["name"]["as"] == autoscaling_objects.METRIC_NAMES[metric]
    ]
    matchers = f'namespace="{NAMESPACE}",pod=~"{POD}"'
    if metric in autoscaling_objects.PER_MODEL:
        matchers += "," + autoscaling_objects.exclude_models(autoscaling_objects.ensembles(tp))
    return rule["metricsQuery"].replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "pod")


def test_generated_queries_on_real_prometheus_and_triton(serve_pipeline, prometheus_dir):
    doc = example("fanout")
    doc["metadata"]["namespace"] = NAMESPACE
    tp = parse_pipeline(doc)
    server = serve_pipeline(doc)
    metrics_target = server.metrics_url.removeprefix("http://").removesuffix("/metrics")
    queue = autoscaling_objects.pipeline_query(tp, "queueTime")
    pending = autoscaling_objects.pipeline_query(tp, "pendingRequests")
    gpu = autoscaling_objects.pipeline_query(tp, "gpuUtilization")
    print(f"\nqueueTime:       {queue}\npendingRequests: {pending}\ngpuUtilization:  {gpu}")
    assert 'model!~"vision"' in pending and 'model!~"vision"' in queue  # never the ensemble
    pod = f'namespace="{NAMESPACE}",pod="{POD}"'
    with Prometheus(prometheus_dir, [(metrics_target, {"namespace": NAMESPACE, "pod": POD})]) as prom:
        wait_for(
            "3 scrapes of the tritonserver",
            lambda: (
                (
                    prom.value(f'count_over_time(nv_inference_request_success{{{pod},model="vision"}}[1m])')
                    or 0
                )
                >= 3
            ),
            timeout=30,
        )
        # idle (no request yet): about zero, not NaN or empty
        idle_queue, idle_pending = prom.value(queue), prom.value(pending)
        print(f"idle: queueTime {idle_queue} us, pendingRequests {idle_pending}")
        assert idle_queue is not None and idle_queue == pytest.approx(0, abs=1.0)
        assert idle_pending == 0
        assert prom.query(gpu) == []  # valid PromQL; this CPU-only tritonserver exports no GPU metrics

        load = Load(server.grpc_url)
        load.start()
        time.sleep(5 + SETTLED_S)  # the rate window now holds several loaded scrapes
        samples = []
        while load.is_alive() and len(samples) < 16:
            # an instant a few scrapes back: every sample up to it is stored, so each query of this
            # sample sees the same data (at "now" a scrape can land between two of the queries)
            at = time.time() - SETTLED_S
            samples.append(
                {
                    "queue": prom.value(queue, at),
                    "queue_adapter": prom.query(adapter_query("queueTime", tp), at),
                    "queue_with_ensemble": prom.value(autoscaling_objects.expression("queueTime", pod), at),
                    "pending": prom.value(pending, at),
                    "pending_adapter": prom.query(adapter_query("pendingRequests", tp), at),
                    "pending_all": prom.value(f"sum(nv_inference_pending_request_count{{{pod}}})", at),
                    "pending_ensemble": prom.value(
                        f'nv_inference_pending_request_count{{{pod},model="vision"}}', at
                    ),
                }
            )
            time.sleep(0.5)
        load.join(LOAD_SECONDS + 30)
        assert load.error is None, load.error
        assert load.result is not None and load.result.errors == 0, load.result
        print(
            f"load: {load.result.requests} requests, {load.result.throughput:.0f}/s, p50 "
            f"{load.result.p50:.1f} ms; {len(samples)} samples"
        )
        for s in samples:
            print(
                f"  queueTime {s['queue']:.0f} us (ensemble included: {s['queue_with_ensemble']:.0f}), "
                f"pendingRequests {s['pending']:.0f} (ensemble {s['pending_ensemble']:.0f}, "
                f"all models {s['pending_all']:.0f})"
            )
        assert len(samples) >= 6
        # under load: a real queue time, and the chart's adapter rule gives the pod the same number
        assert all(s["queue"] > 100 for s in samples), samples
        for s in samples:
            (per_pod,) = s["queue_adapter"]
            assert per_pod["metric"] == {"pod": POD}
            assert float(per_pod["value"][1]) == pytest.approx(s["queue"], rel=1e-9)
        # the ensemble is left out: its requests barely queue (the steps do), so counting them would
        # dilute the average, here by about a fifth (5 models instead of 4)
        assert all(s["queue_with_ensemble"] < 0.9 * s["queue"] for s in samples), samples
        # pendingRequests counts the composing models only (this tritonserver reports 0 pending for the
        # ensemble itself; the matcher keeps it out should a version count its in-flight requests)
        for s in samples:
            assert s["pending"] == s["pending_all"] - s["pending_ensemble"], s
            (per_pod,) = s["pending_adapter"]
            assert float(per_pod["value"][1]) == s["pending"]
        assert any(s["pending"] > 0 for s in samples), samples

        # idle again: the same query with a window shorter than the wait reads about zero
        last_request = time.time()
        short = autoscaling_objects.pipeline_query(tp, "queueTime", window="5s")
        time.sleep(8)
        after = prom.value(short)
        still = prom.value(queue)  # the 1m window still holds the load
        print(f"idle after load: queueTime[5s] {after} us (queueTime[1m] {still:.0f} us)")
        assert after == pytest.approx(0, abs=1.0)
        assert still > 0
        assert prom.value(pending) == 0
        assert time.time() - last_request < 60
