"""Pod-level scenarios on real pods: every example and pipelines that are not examples served from a PVC,
a spec change rolled under load with no failed request, an invalid update that leaves the pods serving,
and the operator pod killed and restarted with no duplicate or lost child.

Written against a `Cluster` (tests/node_cluster.py): the kind cluster of `make e2e`, or any kubeconfig
(TRITONPIPELINE_E2E_KUBECONFIG, e.g. the kind + GPU cluster of e2e/kind-gpu.sh). Every answer is checked by
e2e/infer.py --spec inside the cluster network, through the Service's ClusterIP, against a reference
evaluation of the CR's graph. Marker `node`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node_cluster import (
    EXAMPLES,
    NAMESPACE,
    NOT_EXAMPLES,
    RELEASE,
    RELEASE_NS,
    Cluster,
    LoadClient,
    active_operator_pod,
    check_pipeline,
    children,
    condition,
    deployments,
    diagnostics,
    fleet_docs,
    helm_upgrade,
    models_claim,
    operator_pods,
    pod_ready,
    pods,
    wait,
)
from tritonpipeline.render.meta import PIPELINE_LABEL

pytestmark = [pytest.mark.node, pytest.mark.anycluster, pytest.mark.timeout(1500)]


def apply(cluster: Cluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)})
    )


def ready(cluster: Cluster, name: str) -> bool:
    return condition(cluster, name, "Ready").get("status") == "True"


def pods_ready(cluster: Cluster, name: str) -> dict[str, bool]:
    """The pipeline's pods: uid -> Ready."""
    return {p["metadata"]["uid"]: pod_ready(p) for p in pods(cluster, name)}


def replica_sets(cluster: Cluster, name: str) -> dict[str, int]:
    """The pipeline's ReplicaSets: name -> desired replicas."""
    selector = f"{PIPELINE_LABEL}={name}"
    items = json.loads(cluster.kubectl("get", "rs", "-n", NAMESPACE, "-l", selector, "-o", "json"))["items"]
    return {rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in items}


def answered(cluster: Cluster, doc: dict[str, Any], workdir: Path) -> subprocess.CompletedProcess[str] | None:
    proc = check_pipeline(cluster, doc, workdir)
    return proc if proc.returncode == 0 else None


def ready_lag(cluster: Cluster, names: list[str]) -> str:
    """When each pipeline's pods became Ready and when its CR's Ready condition followed (the operator's
    status lines too): a report, to see a lagging status."""
    lines = []
    for name in names:
        pod_ready = [
            c["lastTransitionTime"]
            for p in pods(cluster, name)
            for c in p["status"].get("conditions", [])
            if c["type"] == "Ready"
        ]
        cr_ready = condition(cluster, name, "Ready").get("lastTransitionTime")
        lines.append(f">> {name}: pods Ready at {pod_ready}, CR Ready at {cr_ready}")
    operator = active_operator_pod(cluster)
    log = cluster.kubectl("logs", "-n", RELEASE_NS, operator["metadata"]["name"], "--timestamps", check=False)
    lines += [
        f"   {line[:220]}"
        for line in log.splitlines()
        if any(f"/{n}" in line or f" {n}" in line for n in names)
    ][-40:]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def fleet(
    cluster: Cluster, chart_operator: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Every example and NOT_EXAMPLES applied at once; waits until all are Ready and answer correctly.
    Yields {"docs": name -> CR, "dir": a directory for spec files, "ready_s"/"answer_s": name -> seconds}."""
    workdir = tmp_path_factory.mktemp("fleet")
    docs = {d["metadata"]["name"]: d for d in fleet_docs(cluster, models_claim(cluster))}
    # the pod the rollout replaces leaves 5 s after SIGTERM, not Triton's default 30 s (a client that keeps
    # sending holds it that long): the same path, a shorter wait (bench/e2e_node.py keeps the default)
    docs["graphs"]["spec"]["server"]["args"] = ["--exit-timeout-secs=5"]
    # the ids OpenShift's restricted-v2 SCC gives a pod that names none (the operator's render there): a
    # uid of the namespace's range that no /etc/passwd names, the root group, the range's fsGroup
    docs["graphs"]["spec"]["server"]["podSecurityContext"] = ASSIGNED_IDS
    t0 = time.monotonic()
    apply(cluster, *docs.values())
    ready_s: dict[str, float] = {}
    answer_s: dict[str, float] = {}

    def all_answered() -> bool:
        for name, doc in docs.items():
            if name not in ready_s and ready(cluster, name):
                ready_s[name] = time.monotonic() - t0
            if name in ready_s and name not in answer_s and answered(cluster, doc, workdir):
                answer_s[name] = time.monotonic() - t0
        return len(answer_s) == len(docs)

    wait("every pipeline Ready and answering", all_answered, 420, lambda: diagnostics(cluster, NAMESPACE))
    print(f">> {len(docs)} pipelines applied at once: Ready {ready_s}; first correct answer {answer_s}")
    print(ready_lag(cluster, list(docs)))
    yield {"docs": docs, "dir": workdir, "ready_s": ready_s, "answer_s": answer_s}
    cluster.kubectl("delete", "tritonpipeline", *docs, "-n", NAMESPACE, "--wait=false", check=False)


@pytest.mark.parametrize("name", [p.stem for p in EXAMPLES] + list(NOT_EXAMPLES))
def test_pipeline_pods_are_ready_and_answer_correctly_through_the_cluster_ip(
    cluster: Cluster, fleet: dict[str, Any], name: str
) -> None:
    doc = fleet["docs"][name]
    running = pods(cluster, name)
    assert len(running) == doc["spec"]["server"].get("replicas", 1), diagnostics(cluster, NAMESPACE)
    for pod in running:
        conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conditions["Ready"] == "True", pod["status"]
    proc = check_pipeline(cluster, doc, fleet["dir"])
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for pipeline in doc["spec"]["pipelines"]:
        assert f"PASS {pipeline['name']}" in proc.stdout
    if any("sequenceBatching" in m for m in doc["spec"]["models"]):
        assert "interleaved sequences" in proc.stdout


ASSIGNED_IDS = {"runAsUser": 1000680000, "runAsGroup": 0, "fsGroup": 1000680000}


def test_a_pod_under_the_ids_openshift_assigns_assembles_and_serves(
    cluster: Cluster, fleet: dict[str, Any]
) -> None:
    """On OpenShift the Triton pods run under ids the platform assigns (docs/reference/install.md):
    the init container assembles the repository and Triton serves it as a user /etc/passwd does not
    name, in the root group. The fleet's `graphs` pipeline runs so (its answers are checked above)."""
    (pod, *_) = pods(cluster, "graphs")
    name = pod["metadata"]["name"]
    ids = cluster.kubectl("exec", "-n", NAMESPACE, name, "-c", "tritonserver", "--", "id")
    assert ids.startswith(f"uid={ASSIGNED_IDS['runAsUser']} gid=0(root)"), ids
    assert str(ASSIGNED_IDS["fsGroup"]) in ids.split("groups=")[1], ids
    assert pod_ready(pod)


def rolled(cluster: Cluster, name: str, old_pods: set[str], old_rs: set[str]) -> bool:
    """A new ReplicaSet owns every pod, the old pods are gone and the pipeline is Ready again."""
    now = {p["metadata"]["uid"] for p in pods(cluster, name)}
    scaled = {rs for rs, replicas in replica_sets(cluster, name).items() if replicas > 0}
    return bool(now) and not now & old_pods and not scaled & old_rs and ready(cluster, name)


def test_spec_change_rolls_the_pods_with_no_failed_request(cluster: Cluster, fleet: dict[str, Any]) -> None:
    """A stateless pipeline under constant load while a model's config changes: new pods replace the
    old ones (maxSurge 1, maxUnavailable 0; preStop keeps the old pod serving while kube-proxy drops its
    endpoint) and not one request fails or answers wrong numbers."""
    name = "graphs"
    doc = json.loads(json.dumps(fleet["docs"][name]))
    old_pods = {p["metadata"]["uid"] for p in pods(cluster, name)}
    old_rs = set(replica_sets(cluster, name))
    client = LoadClient(cluster, doc, fleet["dir"])
    try:
        time.sleep(3)  # load first
        doc["spec"]["models"][1]["dynamicBatching"] = {"maxQueueDelayMicroseconds": 200}
        t = time.monotonic()
        apply(cluster, doc)
        wait("the spec change rolled out", lambda: rolled(cluster, name, old_pods, old_rs), 240,
             lambda: diagnostics(cluster, NAMESPACE))  # fmt: skip
        rollout_s = time.monotonic() - t
        time.sleep(3)  # and after
    finally:
        counts = client.stop()
    print(f">> rollout {rollout_s:.1f}s under load: {counts}")
    assert counts["failed"] == 0, counts
    assert counts["ok"] > 50, counts
    fleet["docs"][name] = doc


INVALID = {
    # a step reading its own successor: a cycle
    "cycle": lambda spec: spec["pipelines"][0]["steps"][1]["inputs"].update(FEATS_IN_B="merge.JOINED"),
    # a step naming a model the CR does not declare
    "unknown model": lambda spec: spec["pipelines"][0]["steps"][1].update(model="nowhere"),
}


@contextlib.contextmanager
def webhook_removed(cluster: Cluster) -> Iterator[None]:
    """The chart's ValidatingWebhookConfiguration away for a while, as on a cluster installed with
    `webhook.enabled=false` or for a pipeline stored before the webhook existed; then put back as the
    operator had filled it in (its CA bundle is still the operator's)."""
    name = f"{RELEASE}-triton-pipeline"
    saved = json.loads(cluster.kubectl("get", "validatingwebhookconfiguration", name, "-o", "json"))
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        saved["metadata"].pop(key, None)
    cluster.kubectl("delete", "validatingwebhookconfiguration", name)
    try:
        yield
    finally:
        cluster.kubectl("create", "-f", "-", input=json.dumps(saved))


def refusal(cluster: Cluster, doc: dict[str, Any]) -> str:
    """kubectl apply's error, or '' when the apply was accepted."""
    try:
        apply(cluster, doc)
    except Exception as err:  # the Cluster's kubectl error carries kubectl's stderr
        return str(err)
    return ""


@pytest.mark.parametrize("mistake", list(INVALID))
def test_invalid_update_leaves_the_pods_serving(
    cluster: Cluster, fleet: dict[str, Any], mistake: str
) -> None:
    """At admission the webhook refuses the update with its field path. Past admission (no webhook) the
    operator stores SpecValid=False and leaves the running pods as they are, serving."""
    name = "diamond"
    doc = fleet["docs"][name]
    before_pods = {p["metadata"]["uid"] for p in pods(cluster, name)}
    before_rs = replica_sets(cluster, name)
    bad = json.loads(json.dumps(doc))
    INVALID[mistake](bad["spec"])
    error = refusal(cluster, bad)
    assert "denied the request" in error and "spec.pipelines[0].steps[1]" in error, error
    print(f">> {mistake}: refused at admission: {error.splitlines()[-1]}")
    with webhook_removed(cluster):
        apply(cluster, bad)
        try:

            def rejected() -> dict[str, Any] | None:
                valid = condition(cluster, name, "SpecValid")
                return valid if valid.get("status") == "False" else None

            valid = wait("SpecValid=False", rejected, 60, lambda: diagnostics(cluster, NAMESPACE))
            print(f">> {mistake}: SpecValid {valid['reason']}: {valid['message']}")
            time.sleep(5)  # room for a wrong rollout to start
            assert {p["metadata"]["uid"] for p in pods(cluster, name)} == before_pods
            assert replica_sets(cluster, name) == before_rs
            proc = check_pipeline(cluster, doc, fleet["dir"])  # still the valid pipeline's answers
            assert proc.returncode == 0, proc.stdout + proc.stderr
        finally:
            apply(cluster, doc)
    wait("SpecValid=True again", lambda: condition(cluster, name, "SpecValid").get("status") == "True", 60)
    wait("Ready again", lambda: ready(cluster, name), 60, lambda: diagnostics(cluster, NAMESPACE))
    assert {p["metadata"]["uid"] for p in pods(cluster, name)} == before_pods


def test_killed_operator_pod_is_restarted_and_converges_with_no_duplicate_or_lost_child(
    cluster: Cluster, fleet: dict[str, Any]
) -> None:
    """The active operator pod deleted (SIGTERM, then SIGKILL after the grace period): the standby pod
    takes over and applies a spec change made meanwhile, the Deployment replaces the pod, and no child is
    duplicated or lost."""
    names = list(fleet["docs"])
    before = {n: children(cluster, n) for n in names}
    old = active_operator_pod(cluster)
    assert len(operator_pods(cluster)) == 2  # the chart's default: one active, one standby
    t = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", RELEASE_NS, old["metadata"]["name"], "--wait=false")
    # a spec change while the active pod goes (one more replica): applied by the one that takes over
    changed = "graphs"
    doc = json.loads(json.dumps(fleet["docs"][changed]))
    doc["spec"]["server"]["replicas"] = 2
    apply(cluster, doc)

    def generation_seen() -> bool:
        cr = json.loads(cluster.kubectl("get", "tritonpipeline", changed, "-n", NAMESPACE, "-o", "json"))
        return bool(cr.get("status", {}).get("observedGeneration") == cr["metadata"]["generation"])

    wait(
        "the change made while the active operator pod went applied",
        generation_seen,
        180,
        lambda: diagnostics(cluster, NAMESPACE),
    )
    handover_s = time.monotonic() - t
    wait(
        "the changed pipeline Ready",
        lambda: ready(cluster, changed),
        180,
        lambda: diagnostics(cluster, NAMESPACE),
    )
    new = active_operator_pod(cluster, not_uid=old["metadata"]["uid"])
    proc = cluster.kubectl(
        "rollout", "status", f"deployment/{RELEASE}-triton-pipeline", "-n", RELEASE_NS, "--timeout=180s"
    )
    assert "successfully rolled out" in proc
    assert old["metadata"]["uid"] not in [p["metadata"]["uid"] for p in operator_pods(cluster)]
    wait(
        "two Ready pods",
        lambda: sum(pods_ready(cluster, changed).values()) == 2,
        180,
        lambda: diagnostics(cluster, NAMESPACE),
    )
    time.sleep(5)  # room for a duplicate or a deletion to show
    for name in names:
        after = children(cluster, name)
        assert ready(cluster, name), condition(cluster, name, "Ready")
        if name == changed:  # the same objects, pod included, and one pod more
            assert {k: after.get(k) for k in before[name]} == before[name]
            assert [k.split("/")[0] for k in after.keys() - before[name].keys()] == ["Pod"], after
        else:  # nothing changed: the very same objects, pods included
            assert after == before[name], name
    print(
        f">> active operator pod {old['metadata']['name']} deleted: {new['metadata']['name']} took over and "
        f"applied the change in {handover_s:.1f}s; children kept"
    )
    proc2 = check_pipeline(cluster, doc, fleet["dir"])
    assert proc2.returncode == 0, proc2.stdout
    fleet["docs"][changed] = doc
    for pod in operator_pods(cluster):
        logs = cluster.kubectl("logs", "-n", RELEASE_NS, pod["metadata"]["name"])
        assert "Traceback" not in logs, logs[-3000:]


def test_an_operator_upgrade_restarts_no_triton_pod_and_a_fleet_roll_goes_one_pipeline_at_a_time(
    cluster: Cluster, fleet: dict[str, Any], tmp_path: Path, record_property: Any
) -> None:
    """`helm upgrade` to an operator whose init image differs (what a new release changes in every pod
    template): no Triton pod restarts, no request fails, every pipeline says what differs. Then
    operator.rollOutdated=1: the pipelines take the new rendering one at a time, each Ready again before
    the next, still answering correctly."""
    from tritonpipeline.render import pinning

    image = cluster.images["assembler"].name
    upgraded = f"{image}-upgraded"  # the same image under another name: a different pod template
    cluster.tag_image(image, upgraded)
    names = list(fleet["docs"])
    before = {n: children(cluster, n) for n in names}
    load = LoadClient(cluster, fleet["docs"]["graphs"], fleet["dir"])
    try:
        time.sleep(3)
        t = time.monotonic()
        helm_upgrade(cluster, tmp_path / "helm", "--set", f"assemblerImage={upgraded}")
        record_property("helm_upgrade_seconds", round(time.monotonic() - t, 1))

        def outdated() -> bool:
            reasons = {n: condition(cluster, n, pinning.UP_TO_DATE).get("reason") for n in names}
            return all(r == pinning.OPERATOR_UPGRADED for r in reasons.values())

        wait("every pipeline reporting the new operator's view", outdated, 180,
             lambda: diagnostics(cluster, NAMESPACE))  # fmt: skip
        view_s = time.monotonic() - t
        time.sleep(10)  # room for a restart or a rollout to show
        for name in names:
            assert children(cluster, name) == before[name], name  # pods included: none restarted
        message = condition(cluster, names[0], pinning.UP_TO_DATE)["message"]
        assert f'initContainers[assemble-repository].image ("{image}" -> "{upgraded}")' in message

        # the admin's bounded roll: one pipeline at a time
        t = time.monotonic()
        helm_upgrade(cluster, tmp_path / "helm", "--set", "operator.rollOutdated=1")
        most = 0

        def new_template(deployment: dict[str, Any]) -> bool:
            init = deployment["spec"]["template"]["spec"]["initContainers"][0]
            return bool(init["image"] == upgraded)

        def all_rolled() -> bool:
            nonlocal most
            snapshot = deployments(cluster)  # one list: every Deployment as of one moment
            rolling = [
                n for n in names if new_template(snapshot[n]) and not pinning.rollout_done(snapshot[n])
            ]
            most = max(most, len(rolling))
            return not rolling and all(new_template(snapshot[n]) and ready(cluster, n) for n in names)

        wait("every pipeline rolled", all_rolled, 600, lambda: diagnostics(cluster, NAMESPACE))
        roll_s = time.monotonic() - t
        record_property("view_seconds", round(view_s, 1))
        record_property("roll_seconds", round(roll_s, 1))
        record_property("pipelines", len(names))
        time.sleep(3)
    finally:
        counts = load.stop()
    print(
        f">> operator upgrade: {len(names)} pipelines, 0 Triton pods restarted, new view after "
        f"{view_s:.1f}s; fleet roll (rollOutdated=1) {roll_s:.1f}s, at most {most} rolling at once; "
        f"load on graphs: {counts}"
    )
    assert most == 1
    assert counts["failed"] == 0 and counts["ok"] > 50, counts
    for name in names:
        assert condition(cluster, name, pinning.UP_TO_DATE)["status"] == "True", name
        proc = check_pipeline(cluster, fleet["docs"][name], fleet["dir"])
        assert proc.returncode == 0, proc.stdout
    # back to the chart's defaults: the pods stay as they are (pinned), nothing restarts
    helm_upgrade(cluster, tmp_path / "helm", "--set", "assemblerImage=,operator.rollOutdated=0")
