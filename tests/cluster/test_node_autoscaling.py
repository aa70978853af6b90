"""The HPA loop closed on real pods: a stateless pipeline with `autoscaling` (engine hpa) scales up
under load and back down after it, through real parts only: Triton pods on the cluster (kind's),
Prometheus discovering them through the apiserver, prometheus-adapter serving the chart's rules as
custom.metrics.k8s.io, and the HPA controller of kube-controller-manager (e2e/cluster_metrics.py; both
Prometheus and prometheus-adapter built from their Go modules by e2e/build-gotool.sh).

One scenario per metric (queueTime, pendingRequests). Each records its timeline in seconds from the
load start (metric visible above target, scale decision, new pod Ready, new pod answering, metric back
under target, load stop, scale-down) into bench/results/autoscaling.json and prints it as a table.
Markers `node`, `hpa`: `make e2e-autoscaling` runs it on kind (`python -m e2e.kind --scenarios ...`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from node_cluster import (
    NAMESPACE,
    ROOT,
    Cluster,
    condition,
    diagnostics,
    fanout,
    models_claim,
    pod_ready,
    wait,
)
from tritonpipeline.render.autoscaling_objects import METRIC_NAMES
from tritonpipeline.render.meta import PIPELINE_LABEL

pytestmark = [pytest.mark.node, pytest.mark.hpa, pytest.mark.timeout(1800)]

RESULTS = ROOT / "bench" / "results" / "autoscaling.json"
SCALE_DOWN_WINDOW = 20  # spec.autoscaling.scaleDownStabilizationSeconds (the HPA's default is 300)
MAX_REPLICAS = 2
ENSEMBLE = "vision"  # the pipeline (ensemble) name inside examples/fanout.yaml
CONCURRENCY = 32  # closed-loop requests in flight from the asyncio client
# per-pod targets well under what one pod shows under CONCURRENCY requests (the HPA also wants 10% above
# the target), over what it shows idle (0). Seen with one pod: queueTime 1.5 ms at 16 requests in flight
# on a lightly loaded host, 2.6-8 ms on a busy one; pendingRequests 0-13 per look.
TARGETS = {"queueTime": 500.0, "pendingRequests": 2.0}
UNDER_SAMPLES = 3
EVENTS = (
    ("metric_above_target", "custom metrics API shows a pod above the target"),
    ("scale_decision", "HPA raised the Deployment's replicas"),
    ("new_pod_ready", "the new pod Ready"),
    ("new_pod_answering", "the new pod counts successful requests"),
    ("under_target", "custom metric average back under the target"),
    ("load_stop", "load stopped"),
    ("scale_down", "Deployment back to minReplicas, one pod"),
)


@pytest.fixture(scope="module")
def metrics(
    cluster: Cluster, chart_operator: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    from e2e.cluster_metrics import ClusterMetrics
    from harness.gotools import ToolUnavailable, ensure_tool

    try:
        binaries = {tool: ensure_tool(tool) for tool in ("prometheus", "prometheus-adapter")}
    except ToolUnavailable as err:
        pytest.skip(f"the metrics path cannot be built here: {err}")
    models_claim(cluster)  # also creates NAMESPACE, the namespace Prometheus watches
    m = ClusterMetrics(cluster, binaries, [NAMESPACE], tmp_path_factory.mktemp("metrics")).start()
    print(f">> metrics path up: {json.dumps({k: round(v, 1) for k, v in m.timings.items()})}")
    try:
        yield m
    finally:
        m.stop()


def pipeline(cluster: Cluster, name: str, metric: str) -> dict[str, Any]:
    """examples/fanout.yaml (its ensemble is ENSEMBLE) on the CPU image with small requests, autoscaled."""
    doc = fanout(cluster, models_claim(cluster), name=name)
    doc["spec"]["autoscaling"] = {
        "minReplicas": 1,
        "maxReplicas": MAX_REPLICAS,
        "metric": metric,
        "target": TARGETS[metric],
        "scaleDownStabilizationSeconds": SCALE_DOWN_WINDOW,
    }
    return doc


@dataclass
class Timeline:
    metric: str
    target: float
    t0: float = 0.0
    events: dict[str, float] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    under_since: list[float] = field(default_factory=list)

    def mark(self, event: str, at: float | None = None) -> None:
        if event not in self.events:
            self.events[event] = round((at if at is not None else time.time()) - self.t0, 1)
            print(f">> {self.metric}: {event} at +{self.events[event]}s", flush=True)

    def sample(self, at: float, seen: dict[str, Any], values: dict[str, float]) -> None:
        """Record one look; `values`: the pipeline's pods' metric as the HPA reads it. "under_target"
        is the first of UNDER_SAMPLES looks in a row whose average is under the target (one look at
        a gauge such as pendingRequests can read 0 between two requests)."""
        self.samples.append({"t": round(at - self.t0, 1), **seen, "metric": values})
        if any(v > self.target for v in values.values()):
            self.mark("metric_above_target", at)
        if (seen["replicas"] or 0) > 1:
            self.mark("scale_decision", at)
        under = bool(values) and sum(values.values()) / len(values) < self.target
        if not (under and "scale_decision" in self.events):
            self.under_since = []
            return
        self.under_since.append(at)
        if len(self.under_since) == UNDER_SAMPLES:
            self.mark("under_target", self.under_since[0])


def observe(cluster: Cluster, name: str) -> dict[str, Any]:
    """One look at the HPA, the Deployment and the pipeline's pods."""
    out = cluster.kubectl(
        "get", "hpa,deployment,pods", "-n", NAMESPACE, "-l", f"{PIPELINE_LABEL}={name}", "-o", "json"
    )
    items = json.loads(out)["items"]
    hpa = next((i for i in items if i["kind"] == "HorizontalPodAutoscaler"), {})
    deployment = next(i for i in items if i["kind"] == "Deployment")
    pods = [i for i in items if i["kind"] == "Pod" and not i["metadata"].get("deletionTimestamp")]
    ready = [p["metadata"]["name"] for p in pods if pod_ready(p)]
    cr = json.loads(cluster.kubectl("get", "tritonpipeline", name, "-n", NAMESPACE, "-o", "json"))
    return {
        "replicas": deployment["spec"].get("replicas"),
        "pods": sorted(p["metadata"]["name"] for p in pods),
        "ready": sorted(ready),
        "hpa_desired": hpa.get("status", {}).get("desiredReplicas"),
        # what the operator copied from the HPA into the pipeline's status (every status poll, 30 s)
        "status_autoscaler": (cr.get("status") or {}).get("autoscaler"),
    }


def own_pods(name: str, values: dict[str, float]) -> dict[str, float]:
    """The values of pipeline `name`'s pods (the namespace holds other pipelines' pods too)."""
    return {pod: v for pod, v in values.items() if pod.startswith(f"{name}-")}


def answered_per_pod(metrics: Any, name: str) -> dict[str, float]:
    """Successful ensemble requests per pod of pipeline `name`, from Triton's own counters as
    Prometheus scraped them."""
    pods = f'pod=~"{name}-[a-z0-9]+-[a-z0-9]+"'
    q = f'sum by (pod) (nv_inference_request_success{{namespace="{NAMESPACE}",{pods},model="{ENSEMBLE}"}})'
    return {r["metric"]["pod"]: float(r["value"][1]) for r in metrics.query(q)}


def start_load(cluster: Cluster, name: str, log: Path) -> subprocess.Popen[str]:
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    url = f"{service['spec']['clusterIP']}:{port}"
    cmd = [sys.executable, "-m", "e2e.autoscale_load", "--url", url, "--pipeline", ENSEMBLE]
    with cluster.network(), open(log, "w") as out:
        return subprocess.Popen(
            [*cmd, "--concurrency", str(CONCURRENCY)],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )


def last_load_report(log: Path) -> dict[str, Any]:
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def table(runs: list[dict[str, Any]]) -> str:
    """Seconds from the load start, one column per metric."""
    width = max(len(f"{e} ({w})") for e, w in EVENTS)
    lines = [f"{'event':<{width}}" + "".join(f"{r['metric']:>17}" for r in runs)]
    for event, what in EVENTS:
        cells = [f"+{r['events'][event]}s" if event in r["events"] else "never" for r in runs]
        lines.append(f"{f'{event} ({what})':<{width}}" + "".join(f"{c:>17}" for c in cells))
    return "\n".join(lines)


def record(result: dict[str, Any]) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data.setdefault("runs", {})[result["metric"]] = result
    data["events"] = dict(EVENTS)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    print("\n" + table(list(data["runs"].values())), flush=True)


@pytest.mark.parametrize("metric", ["queueTime", "pendingRequests"])
def test_hpa_scales_the_pipeline_up_under_load_and_down_after_it(
    cluster: Cluster, metrics: Any, metric: str, tmp_path: Path
) -> None:
    name = f"scale-{metric.lower()}"
    target = TARGETS[metric]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pipeline(cluster, name, metric)))
    wait(
        "TritonPipeline Ready",
        lambda: condition(cluster, name, "Ready").get("status") == "True",
        240,
        lambda: diagnostics(cluster, NAMESPACE),
    )
    before = observe(cluster, name)
    assert before["replicas"] == 1 and len(before["ready"]) == 1, before
    (first_pod,) = before["ready"]
    selector = f"model notin ({ENSEMBLE})"  # what the operator's HPA asks for (ensembles excluded)
    metric_name = METRIC_NAMES[metric]
    # idle: the adapter serves the pod's metric, under the target (the HPA holds at minReplicas)
    idle = wait(
        f"{metric_name} served for the idle pod",
        lambda: (
            metrics.custom_metric(NAMESPACE, metric_name, selector).get(first_pod) is not None
            and metrics.custom_metric(NAMESPACE, metric_name, selector)
        ),
        120,
        lambda: metrics.log_tail("prometheus-adapter"),
    )
    assert idle[first_pod] < target, idle

    timeline = Timeline(metric, target)
    log = tmp_path / "load.jsonl"
    timeline.t0 = time.time()
    load = start_load(cluster, name, log)
    new_pod = ""
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert load.poll() is None, log.read_text()[-2000:]
            now = time.time()
            seen = observe(cluster, name)
            timeline.sample(
                now, seen, own_pods(name, metrics.custom_metric(NAMESPACE, metric_name, selector))
            )
            fresh = [p for p in seen["ready"] if p != first_pod]
            if fresh and not new_pod:
                new_pod = fresh[0]
                timeline.mark("new_pod_ready", now)
            if new_pod and answered_per_pod(metrics, name).get(new_pod, 0) > 0:
                timeline.mark("new_pod_answering", now)
            # both pods under load for a while; then until the metric is under the target, or give up
            answering = timeline.events.get("new_pod_answering")
            since = now - timeline.t0 - answering if answering is not None else -1
            if since >= 20 and ("under_target" in timeline.events or since >= 45):
                break
            time.sleep(1)
    finally:
        load.send_signal(signal.SIGTERM)
        load.wait(60)
    timeline.mark("load_stop")
    answered = answered_per_pod(metrics, name)
    load_report = last_load_report(log)
    print(f">> load: {load_report}; answered per pod: {answered}")
    assert "scale_decision" in timeline.events, (timeline.samples[-5:], diagnostics(cluster, NAMESPACE))
    assert new_pod and answered.get(new_pod, 0) > 0, (answered, timeline.samples[-5:])
    assert answered.get(first_pod, 0) > 0, answered
    assert load_report.get("ok", 0) > 0 and load_report.get("wrong") == 0, load_report
    desired = [(x.get("status_autoscaler") or {}).get("desiredReplicas") for x in timeline.samples]
    assert MAX_REPLICAS in desired, timeline.samples[-3:]  # the status showed the HPA's decision

    def scaled_down() -> dict[str, Any] | None:
        seen = observe(cluster, name)
        timeline.sample(
            time.time(), seen, own_pods(name, metrics.custom_metric(NAMESPACE, metric_name, selector))
        )
        return seen if seen["replicas"] == 1 and len(seen["pods"]) == 1 else None

    # the rules' rate window (1m) empties, then the stabilization window, then the HPA's next sync;
    # with the HPA's default window (300 s) this wait fails
    wait("scale-down to one pod", scaled_down, 240, lambda: json.dumps(timeline.samples[-3:]))
    timeline.mark("scale_down")
    result = {
        "metric": metric,
        "metric_name": metric_name,
        "target_per_pod": target,
        "min_replicas": 1,
        "max_replicas": MAX_REPLICAS,
        "scale_down_stabilization_seconds": SCALE_DOWN_WINDOW,
        "concurrency": CONCURRENCY,
        "events": timeline.events,
        "under_target_while_loaded": timeline.events.get("under_target", 1e9) < timeline.events["load_stop"],
        "answered_per_pod": answered,
        "load": load_report,
        "samples": timeline.samples,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timeline.t0)),
    }
    record(result)
    hpa = json.loads(cluster.kubectl("get", "hpa", name, "-n", NAMESPACE, "-o", "json"))
    cluster.kubectl("delete", "tritonpipeline", name, "-n", NAMESPACE, "--wait=false")
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == SCALE_DOWN_WINDOW
    assert timeline.events["scale_down"] > timeline.events["load_stop"]


def test_metric_path_ran_under_least_privilege(cluster: Cluster, metrics: Any) -> None:
    """After the scenarios: Prometheus and the adapter did their work (above) with their own narrow
    identities, and none of their requests to the apiserver was refused."""
    for component in ("prometheus", "prometheus-adapter"):
        log = metrics.log_path(component).read_text(errors="replace")
        assert "forbidden" not in log.lower(), log[-3000:]
