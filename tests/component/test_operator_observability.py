"""What a platform team runs on: the operator's log lines, its /metrics (scraped by the real Prometheus),
its liveness and readiness. The operator runs as a real subprocess against the real kube-apiserver.
Here the tests on real components; the pure ones are in tests/unit/test_operator_observability.py."""

from __future__ import annotations

import base64
import copy
import json
import re
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from component.test_operator import API, SELECTOR, operator_log_on_failure, private_cluster, wait_reconciled
from harness.helm import Helm, by_kind
from harness.operator_process import LocalOperator, PortTaken
from harness.prometheus import Prometheus
from harness.wait import wait_for
from helpers import CLI, ROOT, cluster_doc

OPERATE_PAGE = ROOT / "docs" / "how-to" / "operate.md"


FULL_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) +\S+ ")


PLAIN_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) +")


@pytest.fixture
def operator(
    control_plane: Any, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., LocalOperator]]:
    started: list[LocalOperator] = []

    def start(*args: str, **env: str) -> LocalOperator:
        log = tmp_path / f"operator{len(started)}.log"
        started.append(
            LocalOperator(control_plane.kubeconfig, namespace, log, args, env, endpoints=True).start()
        )
        return started[-1]

    yield start
    for op in started:
        op.stop()
    rep = getattr(request.node, "rep_call", None)
    if started and rep is not None and rep.failed:
        print(f"\n===== operator log =====\n{started[-1].text()[-8000:]}")


def chart_alert_exprs(helm_binary: Path, tmp_path: Path, operator_selector: str) -> dict[str, str]:
    """The expressions of the chart's alerts (templates/prometheusrule.yaml), by alert, rendered by the
    real helm for an operator whose series `operator_selector` matches."""
    values = ["prometheusRule.enabled=true", f"prometheusRule.operatorSelector={operator_selector}"]
    docs = Helm(helm_binary, tmp_path / "helm").template("rel", "ops", set_values=values)
    (rule,) = by_kind(docs, "PrometheusRule")
    return {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}


def outcome_lines(op: LocalOperator, ns: str, name: str) -> list[str]:
    return [line for line in op.lines() if f"[{ns}/{name}] reconcile " in line]


# ------------------------------------------------------------------------------------------ log lines


@pytest.mark.apiserver
def test_full_log_lines_carry_time_level_object_and_one_outcome_per_reconcile(kube, namespace, operator):
    op = operator(TRITONPIPELINE_RESYNC_SECONDS="1")  # default format: full
    doc = cluster_doc("vision", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    created = wait_for("the created line", lambda: outcome_lines(op, namespace, "vision"))[0]
    assert " INFO " in created
    assert "reconcile created (generation 1): 4 objects (" in created  # the disruption budget too
    assert "Deployment/vision" in created and "waiting for pods (0/1 ready)" in created  # no kubelet here

    # a replica change updates exactly the Deployment, and the disruption budget of two replicas
    doc["spec"]["server"]["replicas"] = 2
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    updated = wait_for(
        "the updated line",
        lambda: [x for x in outcome_lines(op, namespace, "vision") if "(generation 2)" in x],
    )
    assert (
        "reconcile updated (generation 2): updated Deployment/vision, PodDisruptionBudget/vision; "
        "waiting for pods (0/2 ready)" in updated[0]
    )

    # the resync re-applies an unchanged spec: nothing changed, the pods are still missing
    wait_for(
        "a resync line",
        lambda: [x for x in outcome_lines(op, namespace, "vision") if "reconcile waiting" in x],
    )
    waiting = next(x for x in outcome_lines(op, namespace, "vision") if "reconcile waiting" in x)
    # ConfigMap, Deployment, Service and the disruption budget of two replicas
    assert "reconcile waiting (generation 2): 4 objects unchanged; waiting for pods (0/2 ready)" in waiting

    # a deleted child: the line names the pipeline it belongs to, and the reconcile re-creates it
    (generated,) = kube.list("v1", "ConfigMap", namespace, f"{SELECTOR}=vision")
    name = generated["metadata"]["name"]
    kube.delete("v1", "ConfigMap", namespace, name)
    restored = f"[{namespace}/vision] ConfigMap/{name} was deleted; restoring it"
    wait_for("the restore line", lambda: restored in op.text())
    recreated = f"[{namespace}/vision] reconcile updated (generation 2): created ConfigMap/{name};"
    wait_for("the re-create line", lambda: recreated in op.text())

    # an invalid spec: the first error, once per reconcile
    bad = copy.deepcopy(doc)
    bad["spec"]["pipelines"][0]["steps"][1]["inputs"] = {"FEATS_IN_B": "rigth.FEATS_A"}
    kube.apply(bad)
    invalid = wait_for(
        "the invalid line", lambda: [x for x in outcome_lines(op, namespace, "vision") if "invalid" in x]
    )
    assert " WARNING " in invalid[0]
    assert (
        "reconcile invalid (generation 3): spec.pipelines[0].steps[1].inputs.FEATS_IN_B: unknown step 'rigth'"
        in invalid[0]
    )
    assert invalid[0].endswith("; last good deployment kept"), invalid
    # a pipeline never valid has no deployment to keep, and the line does not claim one
    fresh = copy.deepcopy(bad)
    fresh["metadata"]["name"] = "fresh"
    kube.apply(fresh)
    never = wait_for(
        "the fresh pipeline's invalid line",
        lambda: [x for x in outcome_lines(op, namespace, "fresh") if "invalid" in x],
    )
    assert never[0].endswith("unknown step 'rigth' (steps: extract, head_b, head_c); nothing deployed yet"), (
        never
    )

    lines = op.lines()
    assert [x for x in lines if not FULL_LINE.match(x)] == []  # time and level on every line
    about = [x for x in lines if "vision" in x]
    assert about and [x for x in about if f"[{namespace}/vision" not in x] == []  # and the object
    assert not [x for x in lines if " DEBUG " in x]  # details only with --verbose


@pytest.mark.apiserver
def test_json_log_lines(kube, namespace, operator):
    op = operator("--log-format", "json")
    kube.apply(cluster_doc("vision", namespace))
    wait_reconciled(kube, namespace, "vision")
    wait_for("the created line", lambda: "reconcile created" in op.text())
    records = [json.loads(line) for line in op.lines()]  # every line is one JSON object
    assert all({"timestamp", "severity", "message"} <= set(r) for r in records)
    (created,) = [r for r in records if r["message"].startswith("reconcile created")]
    assert created["severity"] == "info"
    assert created["object"]["namespace"] == namespace and created["object"]["name"] == "vision"
    assert created["object"]["kind"] == "TritonPipeline"


@pytest.mark.apiserver
def test_secret_values_never_appear_in_any_log_line(control_plane, kube, namespace, operator):
    """A secretRef's Secret exists with recognisable data; the operator runs at DEBUG through create,
    update and resync; neither the value nor its base64 appears anywhere in its output."""
    value = f"s3cr3t-{uuid.uuid4().hex}"
    from kubernetes import client as k8s

    k8s.CoreV1Api(control_plane.api_client()).create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "bucket-creds"},
            "stringData": {"AWS_SECRET_ACCESS_KEY": value, "AWS_ACCESS_KEY_ID": f"id-{value}"},
        },
    )
    op = operator("--verbose", "--log-format", "plain", TRITONPIPELINE_RESYNC_SECONDS="1")
    doc = cluster_doc("vision", namespace)
    doc["spec"]["modelRepository"] = {"uri": "s3://models/triton", "secretRef": {"name": "bucket-creds"}}
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    dep = kube.get("apps/v1", "Deployment", namespace, "vision")
    assert "bucket-creds" in json.dumps(dep)  # the secretRef reached the pods' spec
    doc["spec"]["server"]["replicas"] = 2
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    wait_for("a resync", lambda: "reconcile waiting (generation 2)" in op.text())
    text = op.text()
    assert any(x.startswith("DEBUG ") for x in op.lines())  # DEBUG lines were written
    assert [x for x in op.lines() if not PLAIN_LINE.match(x)] == []
    encoded = base64.b64encode(value.encode()).decode()
    for needle in (value, encoded, encoded[:16], base64.b64encode(f"id-{value}".encode()).decode()):
        assert needle not in text


# ---------------------------------------------------------------------------------------------- metrics


@pytest.mark.apiserver
@pytest.mark.prometheus
@pytest.mark.helm
def test_prometheus_scrapes_the_operator_metrics(
    kube, namespace, operator, prometheus_dir, helm_binary, tmp_path
):
    op = operator(TRITONPIPELINE_WATCH_TIMEOUT_SECONDS="2")
    doc = cluster_doc("vision", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    bad = copy.deepcopy(doc)
    bad["spec"]["pipelines"][0]["steps"][1]["inputs"] = {"FEATS_IN_B": "rigth.FEATS_A"}
    kube.apply(bad)
    wait_reconciled(kube, namespace, "vision", 2)
    op.wait_ready(30)
    status, text = op.get("/metrics")
    assert status == 200
    here = f'pipeline="vision",pipeline_namespace="{namespace}"'
    for series in (
        'tritonpipeline_operator_reconciles_total{outcome="created"} 1.0',
        'tritonpipeline_operator_reconciles_total{outcome="invalid"} 1.0',
        'tritonpipeline_operator_pipelines{ready="False"} 1.0',
        "tritonpipeline_operator_reconcile_duration_seconds_count 2.0",
        # per pipeline (the TritonPipelineNotReady alert): no kubelet here, so never Ready
        f"tritonpipeline_operator_pipeline_ready{{{here}}} 0.0",
        'tritonpipeline_operator_loop_stalled{loop="resync"} 0.0',
    ):
        assert series in text
    # the watch streams end every 2 s here and are reopened
    wait_for(
        "watch restarts",
        lambda: "tritonpipeline_operator_watch_restarts_total{resource=" in op.get("/metrics")[1],
    )
    target = f"127.0.0.1:{op.metrics_port}"
    with Prometheus(prometheus_dir, [(target, {"job": "tritonpipeline-operator"})]) as prom:
        invalid = wait_for(
            "the scraped series",
            lambda: prom.value('sum(tritonpipeline_operator_reconciles_total{outcome="invalid"})'),
            timeout=60,
        )
        assert invalid == 1.0
        assert prom.value('tritonpipeline_operator_pipelines{ready="False"}') == 1.0
        restarts = prom.value("sum(tritonpipeline_operator_watch_restarts_total)")
        assert restarts is not None and restarts > 0
        # the chart's alerts over the real operator's series (the Prometheus here labels them job=...):
        # the pipeline is not Ready (no kubelet), under its own namespace; no loop stalled, no failed apply
        alerts = chart_alert_exprs(helm_binary, tmp_path, 'job="tritonpipeline-operator"')
        not_ready = wait_for(
            "the pipeline-ready series", lambda: prom.query(alerts["TritonPipelineNotReady"]), timeout=60
        )
        assert [r["metric"] for r in not_ready] == [{"namespace": namespace, "pipeline": "vision"}]
        wait_for("the loop gauge", lambda: prom.query("tritonpipeline_operator_loop_stalled"), timeout=60)
        assert prom.query(alerts["TritonPipelineOperatorLoopStalled"]) == []
        assert prom.query(alerts["TritonPipelineReconcileErrors"]) == []
        # the recipes' alert expressions of docs/how-to/operate.md are valid PromQL over these series
        section = OPERATE_PAGE.read_text()
        exprs = re.findall(r"^  expr: (.+)$", section, re.M)
        assert len(exprs) == 2
        for expr in exprs:
            prom.query(expr)
        assert not prom.query(exprs[0])  # the invalid reconcile happened before the first scrape
        bad["spec"]["pipelines"][0]["steps"][1]["inputs"] = {"FEATS_IN_B": "lfet.FEATS_A"}
        kube.apply(bad)  # another invalid reconcile, now under Prometheus' eyes: the alert fires
        wait_for("the invalid-spec alert", lambda: prom.query(exprs[0]), timeout=60)
    # a deleted pipeline leaves the gauges
    kube.delete(API, "TritonPipeline", namespace, "vision")
    gone = 'tritonpipeline_operator_pipelines{ready="False"} 0.0'
    wait_for("the gauge to drop the deleted pipeline", lambda: gone in op.get("/metrics")[1])
    assert f"tritonpipeline_operator_pipeline_ready{{{here}}}" not in op.get("/metrics")[1]


@pytest.mark.apiserver
def test_a_taken_metrics_port_is_one_clear_error(control_plane, namespace, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        op = LocalOperator(control_plane.kubeconfig, namespace, tmp_path / "operator.log", endpoints=True)
        op.metrics_port = taken.getsockname()[1]
        op.args[op.args.index("--metrics") + 1] = f"http://127.0.0.1:{op.metrics_port}"
        with op, pytest.raises(PortTaken, match="exited with 1"):  # the harness starts another then
            op.wait_ready(60)
    text = op.text()
    assert f"cannot serve /metrics at http://127.0.0.1:{op.metrics_port}:" in text
    assert "Traceback" not in text and "unexpected" not in text
    assert text.splitlines()[-1].startswith("error: the operator cannot start: cannot serve /metrics at")


# -------------------------------------------------------------------------------------- health probes


@pytest.mark.apiserver
def test_liveness_fails_while_the_watches_are_stuck_and_recovers(control_plane, tmp_path):
    """The apiserver goes away: the process lives on, but no watch stream can reconnect, so liveness
    turns failing (500) and readiness 503; when the apiserver is back, both recover."""
    with private_cluster(control_plane.binaries, tmp_path, "stuck") as (cp, _):
        env = {"TRITONPIPELINE_WATCH_TIMEOUT_SECONDS": "2", "TRITONPIPELINE_WATCH_STALE_SECONDS": "5"}
        op = LocalOperator(cp.kubeconfig, "stuck", tmp_path / "operator.log", env=env, endpoints=True)
        op.start()
        with operator_log_on_failure(op):
            wait_for("liveness 200", lambda: op.healthz() == 200, timeout=60)
            op.wait_ready(60)
            cp.stop()
            wait_for("liveness failing", lambda: op.healthz() == 500, timeout=60, interval=1)
            status, reason = op.get("/readyz")
            assert status == 503 and "has not reconnected" in reason
            assert op.alive()
            errors = re.search(
                r'^tritonpipeline_operator_api_errors_total\{code="connection"\} (\S+)$',
                op.get("/metrics")[1],
                re.M,
            )
            assert errors and float(errors.group(1)) > 0  # the failed reconnections, counted
            cp.start()
            wait_for("liveness back", lambda: op.healthz() == 200, timeout=90, interval=1)
            op.wait_ready(30)


@pytest.mark.cli
@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--metrics", "localhost:8081"),
        ("--liveness", "http://0.0.0.0:99999/healthz"),
        ("--log-format", "text"),
    ],
)
def test_bad_run_flags_are_usage_errors(flag, value):
    proc = subprocess.run([str(CLI), "run", flag, value], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"argument {flag}:" in proc.stderr and value in proc.stderr
