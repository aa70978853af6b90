#!/usr/bin/env python3
"""An operator upgrade on real pods, measured (docs/how-to/upgrade.md): nothing that serves is disturbed.

On kind (`make bench-upgrade`: e2e/kind.py --bench bench.upgrade), the chart installed as README says but
with `webhook.failurePolicy=Fail`
(so a webhook that is down refuses writes and is counted), five pipelines (every example, `graphs`, and
`fanout` a second time) each under a checking client (e2e/infer.py --loop, through the Service's
ClusterIP). Then:

    upgrade     `helm upgrade` to a new operator build: the operator and assembler images under another
                tag (what a release changes; the pods' init image is the assembler's, named after the
                operator's, so a renderer output changes for every pipeline). The operator's two pods
                roll one at a time. Meanwhile a valid TritonPipeline is applied with `--dry-run=server`
                every APPLY_EVERY seconds (the webhook is called each time). Measured: Triton pod
                restarts (a pod replaced or a container restarted), failed requests, refused applies,
                and the seconds until every pipeline reports the new operator's view (UpToDate=False,
                OperatorUpgraded).
    roll        the admin's bounded roll, `operator.rollOutdated=N`: the most pipelines rolling at once
                (from one list of the Deployments each poll), the seconds until all run the new
                rendering, and the failed requests meanwhile.

    make bench-upgrade      (on a kind cluster it starts; root, as make e2e)
    .venv/bin/python -m bench.upgrade [--roll N] [--out bench/results/upgrade.json]
                            (on the cluster TRITONPIPELINE_E2E_KUBECONFIG names)

Writes the figures as JSON and prints them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/node_cluster.py: the scenarios' Cluster and CRs, shared

from e2e.images import assembler_of  # noqa: E402
from node_cluster import (  # noqa: E402
    NAMESPACE,
    Cluster,
    LoadClient,
    bench_cluster,
    check_pipeline,
    condition,
    deployments,
    fleet_docs,
    helm_upgrade,
    install_chart,
    models_claim,
    wait,
)

APPLY_EVERY = 0.5  # seconds between the dry-run applies during the upgrade
PIPELINES = 5


def apply(cluster: Cluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)})
    )


def triton_pods(cluster: Cluster) -> dict[str, int]:
    """Every pipeline pod: uid -> restarts of its containers."""
    items = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    return {
        p["metadata"]["uid"]: sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", []))
        for p in items
    }


def restarts(before: dict[str, int], after: dict[str, int]) -> int:
    """Pods gone or replaced, and container restarts of the pods that stayed."""
    return len(before.keys() - after.keys()) + sum(after[u] - before[u] for u in before.keys() & after.keys())


class Applier(threading.Thread):
    """`kubectl apply --dry-run=server` of a valid pipeline (a CREATE: the webhook checks it) until
    stopped: how many were tried and refused, with the first refusals' messages."""

    def __init__(self, cluster: Cluster, doc: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.doc = cluster, json.loads(json.dumps(doc))
        self.doc["metadata"]["name"] = "upgrade-probe"
        self.tried = self.refused = 0
        self.messages: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.tried += 1
            try:
                self.cluster.kubectl(
                    "apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-", input=json.dumps(self.doc)
                )
            except AssertionError as exc:  # kubectl's non-zero exit, its stderr
                self.refused += 1
                if len(self.messages) < 5:
                    self.messages.append(str(exc)[:300])
            self.stopping.wait(APPLY_EVERY)

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        self.join(90)
        return {"tried": self.tried, "refused": self.refused, "messages": self.messages}


def upgraded_condition(cluster: Cluster, names: list[str], reason: str) -> bool:
    from tritonpipeline.render import pinning

    return all(condition(cluster, n, pinning.UP_TO_DATE).get("reason") == reason for n in names)


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from tritonpipeline.render import pinning

    cluster = bench_cluster("bench-upgrade")
    install_chart(cluster, workdir / "helm", "--set", "webhook.failurePolicy=Fail")
    uri = models_claim(cluster)
    docs = {d["metadata"]["name"]: d for d in fleet_docs(cluster, uri)}
    second = json.loads(json.dumps(docs["fanout"]))
    second["metadata"]["name"] = "fanout-b"
    docs["fanout-b"] = second
    docs = dict(list(docs.items())[:PIPELINES])
    names = list(docs)

    def applied() -> bool:  # the webhook Service reaches a pod once kube-proxy has its endpoints
        try:
            apply(cluster, *docs.values())
        except AssertionError as exc:  # Cluster.kubectl: the refusal
            print(f">> apply refused, retrying: {str(exc)[-160:]}", flush=True)
            return False
        return True

    wait("the pipelines applied (the webhook reachable)", applied, 120)

    def all_answer() -> bool:
        if not all(condition(cluster, n, "Ready").get("status") == "True" for n in docs):
            return False
        return all(check_pipeline(cluster, d, workdir).returncode == 0 for d in docs.values())

    wait(f"{len(docs)} pipelines answering correctly", all_answer, 600)
    print(f">> {len(docs)} pipelines serving: {', '.join(names)}", flush=True)
    wait("every pipeline up to date", lambda: upgraded_condition(cluster, names, pinning.CURRENT), 120)
    loads = {n: LoadClient(cluster, d, workdir) for n, d in docs.items()}
    result: dict[str, Any] = {"pipelines": names}
    try:
        time.sleep(5)
        # the upgrade: a new operator build, the operator and assembler images under another tag (the
        # chart names the init image after the operator's)
        image = cluster.images["operator"].name
        repository, _, tag = image.rpartition(":")
        new_tag = f"{tag}-next"
        new_init = assembler_of(f"{repository}:{new_tag}")
        cluster.tag_image(image, f"{repository}:{new_tag}")
        cluster.tag_image(cluster.images["assembler"].name, new_init)
        before = triton_pods(cluster)
        applier = Applier(cluster, docs["fanout"])
        applier.start()
        t = time.monotonic()
        helm_upgrade(
            cluster,
            workdir / "helm",
            "--set",
            f"image.repository={repository},image.tag={new_tag},assemblerImage=",  # the chart's default
        )
        operator_rollout_s = time.monotonic() - t
        wait(
            "every pipeline reporting the new operator's view",
            lambda: upgraded_condition(cluster, names, pinning.OPERATOR_UPGRADED),
            300,
        )
        view_s = time.monotonic() - t
        time.sleep(10)  # room for a restart to show
        applies = applier.stop()
        after = triton_pods(cluster)
        result["upgrade"] = {
            "operator_image": f"{image} -> {repository}:{new_tag}",
            "operator_rollout_s": round(operator_rollout_s, 1),
            "seconds_until_every_pipeline_reports_the_new_view": round(view_s, 1),
            "triton_pods_before": len(before),
            "triton_pod_restarts": restarts(before, after),
            "applies_during_upgrade": applies["tried"],
            "refused_applies": applies["refused"],
            "refusals": applies["messages"],
        }
        print(f">> upgrade: {result['upgrade']}", flush=True)

        # the admin's bounded roll
        most = 0

        def new_template(deployment: dict[str, Any]) -> bool:
            init = deployment["spec"]["template"]["spec"]["initContainers"][0]
            return bool(init["image"] == new_init)

        def all_rolled() -> bool:
            nonlocal most
            snapshot = deployments(cluster)
            rolling = [
                n for n in names if new_template(snapshot[n]) and not pinning.rollout_done(snapshot[n])
            ]
            most = max(most, len(rolling))
            done = all(new_template(snapshot[n]) for n in names) and not rolling
            return done and upgraded_condition(cluster, names, pinning.CURRENT)

        t = time.monotonic()
        helm_upgrade(cluster, workdir / "helm", "--set", f"operator.rollOutdated={args.roll}")
        wait("every pipeline rolled", all_rolled, 900)
        result["roll"] = {
            "roll_outdated": args.roll,
            "max_rolling_at_once": most,
            "seconds": round(time.monotonic() - t, 1),
        }
        time.sleep(3)
    finally:
        counts = {n: load.stop() for n, load in loads.items()}
    result["requests"] = counts
    result["requests_ok"] = sum(c["ok"] for c in counts.values())
    result["failed_requests"] = sum(c["failed"] for c in counts.values())
    for doc in docs.values():  # still correct after all of it
        proc = check_pipeline(cluster, doc, workdir)
        if proc.returncode != 0:
            raise AssertionError(f"{doc['metadata']['name']} answers wrong after the roll: {proc.stdout}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--roll", type=int, default=2, help="operator.rollOutdated for the roll (%(default)s)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "upgrade.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-upgrade-") as tmp:
        measured = run(args, Path(tmp))
    upgrade, roll = measured["upgrade"], measured["roll"]
    result = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "kernel": platform.release()},
        "triton_pod_restarts": upgrade["triton_pod_restarts"],
        "failed_requests": measured["failed_requests"],
        "refused_applies": upgrade["refused_applies"],
        "seconds_until_every_pipeline_reports_the_new_view": upgrade[
            "seconds_until_every_pipeline_reports_the_new_view"
        ],
        "roll_max_rolling_at_once": roll["max_rolling_at_once"],
        **measured,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("requests", "host")}, indent=2))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
