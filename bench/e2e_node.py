#!/usr/bin/env python3
"""User-facing figures on real pods: `kubectl apply` to the first correct inference through the Service,
and the rollout time of a spec change, on kind (`make bench-e2e-node`: e2e/kind.py --bench bench.e2e_node).

Three nodes, the chart installed as README says (the operator as a pod, its image built from the
Dockerfile), the models on a hostPath PV. Then:

    apply       each CR of the scenarios (every example, plus `graphs`: a chain, a 3-way fan-out
                with a join, a fan-out with no router; tests/node_cluster.py), ROUNDS times under
                fresh names, applied one at a time; from the `kubectl apply` until the
                pipeline's Ready condition is True, and until the first answer through the Service's
                ClusterIP whose numbers are right (e2e/infer.py's reference evaluation; polled every
                0.2 s from inside a worker's network namespace). p50 and max over the pipelines.
    rollout     a model's config of the stateless `graphs` CR changed ROLLOUTS times, while a
                client checks answers through the ClusterIP the whole time: from the apply until every
                old pod is gone and the pipeline is Ready again; the client's failed requests are
                counted (0 expected).

    make bench-e2e-node     (on a kind cluster it starts; root, as make e2e)
    .venv/bin/python -m bench.e2e_node [--rounds 2] [--rollouts 3] [--out bench/results/e2e-node.json]
                            (on the cluster TRITONPIPELINE_E2E_KUBECONFIG names)

Writes the figures as JSON and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/node_cluster.py: the scenarios' Cluster and CRs, shared

from e2e.infer import Checker  # noqa: E402
from node_cluster import (  # noqa: E402
    NAMESPACE,
    Cluster,
    bench_cluster,
    condition,
    endpoint,
    fleet_docs,
    install_chart,
    models_claim,
)

POLL = 0.2


def apply(cluster: Cluster, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def first_answer(cluster: Cluster, doc: dict[str, Any], timeout: float = 300) -> dict[str, float]:
    """Seconds from now (the apply) to Ready and to the first correct answer of every pipeline in `doc`."""
    name, t0 = doc["metadata"]["name"], time.monotonic()
    seen: dict[str, float] = {}
    checker = None
    try:
        while time.monotonic() - t0 < timeout:
            if "ready" not in seen and condition(cluster, name, "Ready").get("status") == "True":
                seen["ready"] = time.monotonic() - t0
            if "answer" not in seen:
                with contextlib.suppress(Exception), cluster.network():  # no Service/endpoint/model yet
                    checker = checker or Checker(endpoint(cluster, name), doc["spec"])
                    for pipeline in checker.pipelines:
                        checker.check(pipeline)
                    seen["answer"] = time.monotonic() - t0
            if len(seen) == 2:
                return seen
            time.sleep(POLL)
    finally:
        if checker:
            checker.close()
    raise TimeoutError(f"{name}: {seen} within {timeout:.0f}s")


def measure_applies(cluster: Cluster, uri: str, rounds: int) -> dict[str, dict[str, float]]:
    """Each CR of the scenarios applied alone, `rounds` times under fresh names: CR name -> seconds to
    Ready ("ready") and to the first correct answer ("answer")."""
    measured = {}
    for round_ in range(rounds):
        for doc in fleet_docs(cluster, uri):
            if round_:
                doc["metadata"]["name"] += f"-{round_ + 1}"
            apply(cluster, doc)
            seconds = {k: round(v, 2) for k, v in first_answer(cluster, doc).items()}
            measured[doc["metadata"]["name"]] = seconds
            print(f">> {doc['metadata']['name']}: {seconds}", flush=True)
    return measured


def pods(cluster: Cluster, name: str) -> dict[str, bool]:
    """The pipeline's pods: uid -> Ready."""
    from tritonpipeline.render.meta import PIPELINE_LABEL

    out = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"{PIPELINE_LABEL}={name}", "-o", "json")
    return {
        p["metadata"]["uid"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])
        )
        for p in json.loads(out)["items"]
    }


def rollout(cluster: Cluster, doc: dict[str, Any], delay_us: int, workdir: Path) -> dict[str, Any]:
    """Change a model's config under load: seconds until a new pod is Ready ("new_pod_ready_s") and until
    the old pods are gone with the pipeline Ready ("seconds"); the load client's counts."""
    from node_cluster import spec_file

    name = doc["metadata"]["name"]
    old = set(pods(cluster, name))
    cmd = [sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", endpoint(cluster, name)]
    client = cluster.start([*cmd, "--spec", str(spec_file(doc, workdir)), "--loop"])
    new_ready = None
    try:
        time.sleep(2)
        doc["spec"]["models"][1]["dynamicBatching"] = {"maxQueueDelayMicroseconds": delay_us}
        t0 = time.monotonic()
        apply(cluster, doc)
        while True:
            now = pods(cluster, name)
            if new_ready is None and any(ready for uid, ready in now.items() if uid not in old):
                new_ready = time.monotonic() - t0
            if now and not now.keys() & old and condition(cluster, name, "Ready").get("status") == "True":
                break
            if time.monotonic() - t0 > 300:
                raise TimeoutError(f"{name}: rollout not done in 300s")
            time.sleep(POLL)
        seconds = time.monotonic() - t0
        time.sleep(2)
    finally:
        client.send_signal(2)
        out, _ = client.communicate(timeout=60)
    counts = json.loads(out.strip().splitlines()[-1])
    return {
        "new_pod_ready_s": round(new_ready or seconds, 2),
        "seconds": round(seconds, 2),
        "requests_ok": counts["ok"],
        "requests_failed": counts["failed"],
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 2), "max": round(max(values), 2), "n": len(values)}


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cluster = bench_cluster("bench-e2e-node")
    t = time.monotonic()
    install_chart(cluster, workdir / "helm")
    operator_s = time.monotonic() - t
    uri = models_claim(cluster)
    per_pipeline = measure_applies(cluster, uri, args.rounds)
    graphs = next(d for d in fleet_docs(cluster, uri) if d["metadata"]["name"] == "graphs")
    rollouts = []
    for k in range(args.rollouts):
        rollouts.append(rollout(cluster, graphs, 100 + 100 * k, workdir))
        print(f">> rollout {k + 1}: {rollouts[-1]}", flush=True)
    return {
        "helm_upgrade_to_operator_ready_s": round(operator_s, 2),
        "apply_to_ready_s": summary([p["ready"] for p in per_pipeline.values()]),
        "apply_to_first_correct_inference_s": summary([p["answer"] for p in per_pipeline.values()]),
        "per_pipeline": per_pipeline,
        "rollout_new_pod_ready_s": summary([r["new_pod_ready_s"] for r in rollouts]),
        "rollout_s": summary([r["seconds"] for r in rollouts]),
        "rollouts": rollouts,
        "rollout_failed_requests": sum(r["requests_failed"] for r in rollouts),
    }


def table(result: dict[str, Any]) -> str:
    rows = [("pipeline", "apply->Ready s", "apply->first correct answer s")]
    rows += [(n, f"{p['ready']:.1f}", f"{p['answer']:.1f}") for n, p in result["per_pipeline"].items()]
    a, ready = result["apply_to_first_correct_inference_s"], result["apply_to_ready_s"]
    r, n = result["rollout_s"], result["rollout_new_pod_ready_s"]
    rows += [("p50 / max", f"{ready['p50']:.1f} / {ready['max']:.1f}", f"{a['p50']:.1f} / {a['max']:.1f}")]
    lines = [f"{x:12} {y:>16} {z:>30}" for x, y, z in rows]
    lines.append(
        f"rollout of a spec change (graphs, under load), over {r['n']}: new pod Ready p50 {n['p50']:.1f}s "
        f"max {n['max']:.1f}s; old pods gone p50 {r['p50']:.1f}s max {r['max']:.1f}s; "
        f"failed requests {result['rollout_failed_requests']} of "
        f"{sum(x['requests_ok'] + x['requests_failed'] for x in result['rollouts'])}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=2, help="applies of every CR, fresh names (%(default)s)"
    )
    parser.add_argument("--rollouts", type=int, default=3, help="spec changes under load (%(default)s)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "e2e-node.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-e2e-node-") as tmp:
        result = run(args, Path(tmp))
    result = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "kernel": platform.release()},
        **result,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
