"""Chaos on real parts (issue 53, point 7): a real kube-apiserver + etcd (harness/controlplane.py) and the
operator as real `tritonpipeline run` processes, disturbed the ways a shared cluster disturbs them, each
scenario asserting what must hold and recording its numbers. `make bench-chaos` (bench/chaos.py) runs this
module and writes the numbers to bench/results/chaos.json; `make test` runs it like any other.

Each scenario puts together parts that other tests check one at a time, and reuses their helpers:

1. a team's objects under a pipeline's generated names, made before and after it, through spec changes,
   a kill -9, a restart and the deletion of a pipeline: none changed or deleted (parts alone:
   tests/component/test_operator_ownership.py);
2. two pipelines whose children's names collide (`b` with Header routing, `b-headless`), the loser's
   spec changed and the operator killed: no write reaches the headless Service (ibid.);
3. the apiserver stopped 60 s: drift is undone within one resync after
   (tests/component/test_operator_outage.py does 25 s);
4. kill -9 while 20 pipelines are created, then while their repositories change: every one converges,
   no child half-applied, made twice or left without its pipeline, and at no moment does a Deployment
   mount another repository than its template's (tests/component/test_operator.py kills during the creates);
5. the active replica killed while pipelines are created and changed: the standby takes over and every
   pipeline converges to its last spec (tests/component/test_operator_ha.py, without the churn);
6. a rolling upgrade across the CRD skew: the old replica and the new one (peering, each serving its
   webhook) while the newer CRD is applied and writes go on: none refused, no pipeline marked invalid
   (tests/component/test_crd_skew.py, one replica at a time).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.chaos import RESULTS_ENV
from component.test_crd_skew import NAMESPACE as SKEW_NAMESPACE
from component.test_crd_skew import STORED, helm_installed, newer_crd
from component.test_crd_skew import snapshot as skew_snapshot
from component.test_crd_upgrade import _kubectl_server_side_apply as kubectl_server_side_apply
from component.test_operator import API, get_cr, operator_log_on_failure, private_cluster, wait_reconciled
from component.test_operator_ha import (
    LIFETIME,
    ActiveSampler,
    logged,
    logged_at,
    peering_in,
    replica_env,
    replicas,  # noqa: F401  (a fixture)
    utc_now,
)
from component.test_operator_outage import NAMESPACE as OUTAGE_NAMESPACE
from component.test_operator_outage import RESYNC as OUTAGE_RESYNC
from component.test_operator_outage import hand_edit_selector, last_passes, selector
from component.test_operator_ownership import header_routed, snapshot, team_objects
from component.test_webhook import collection, create, merge_patch, start_webhook_operator
from harness.kubeapi import CRD_NAME, wait_established
from harness.operator_process import LocalOperator, OperatorProcess
from harness.wait import wait_for
from helpers import cluster_doc, condition
from support.crd_skew import with_future_fields
from tritonpipeline.errors import SpecError
from tritonpipeline.kube.api_client import Kube, path
from tritonpipeline.render.manifests import HASH_ANNOTATION
from tritonpipeline.render.ownership import NAME_TAKEN, OWNED, controller, generated_names
from tritonpipeline.render.packing import entries_of, unpack

pytestmark = pytest.mark.apiserver

OUTAGE_SECONDS = 60  # issue 53: the apiserver stopped this long
FAST = {"TRITONPIPELINE_RESYNC_SECONDS": "1"}  # a resync every second: a restart's first pass comes soon


# ------------------------------------------------------------------------------------- the numbers


@pytest.fixture(scope="module")
def chaos_results(control_plane: Any) -> Iterator[dict[str, Any]]:
    """The scenarios' results by test name; written as JSON to $TRITONPIPELINE_CHAOS_RESULTS (with the
    machine: bench/controlplane's description of it) after the module, when that is set."""
    found: dict[str, Any] = {}
    yield found
    out = os.environ.get(RESULTS_ENV)
    if out:
        from bench.controlplane.report import machine_info

        Path(out).write_text(
            json.dumps({"machine": machine_info(control_plane), "scenarios": found}, indent=2)
        )


@pytest.fixture
def record(chaos_results: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A dict the scenario fills with its numbers as it goes; kept with whether the test passed and its
    wall time (a failed scenario keeps the numbers it got to)."""
    numbers: dict[str, Any] = {}
    started = time.monotonic()
    yield numbers
    report = getattr(request.node, "rep_call", None)
    chaos_results[request.node.name] = {
        "passed": report is not None and report.passed,
        "seconds": round(time.monotonic() - started, 1),
        "numbers": numbers,
    }


def changed_and_deleted(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Of two `snapshot`s of the same objects: those changed (uid, resourceVersion, owners, spec or data)
    and those gone."""
    deleted = [key for key in before if after.get(key) is None]
    changed = [key for key in before if after.get(key) is not None and after[key] != before[key]]
    return changed, deleted


def wait_resyncs(op: LocalOperator, passes: int = 2, period: float = 1.0) -> None:
    """Until the operator completed `passes` resync passes from now (its loop metric)."""
    since = time.time()
    wait_for(
        f"{passes} resync passes",
        lambda: last_passes(op).get("resync", 0) > since + (passes - 1) * period,
        timeout=30 + passes * period,
    )


class Repeated:
    """`step(i)` for i = 0, 1, 2, ... every `every` seconds in a thread while the block runs: when each
    step ended and what it found wrong (None: nothing; an exception is something too). A churn of writes
    (what refused each one) or a watch (what each look saw)."""

    def __init__(self, step: Callable[[int], str | None], every: float) -> None:
        self.step = step
        self.every = every
        self.done: list[tuple[float, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="repeated", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                wrong = self.step(i)
            except Exception as exc:  # any failure of a step is what this counts
                wrong = f"{type(exc).__name__}: {exc}"
            self.done.append((time.monotonic(), wrong))
            i += 1
            self._stop.wait(self.every)

    def wait(self, more: int) -> None:
        """Until `more` steps were made from now."""
        target = len(self.done) + more
        wait_for(f"{more} more steps", lambda: len(self.done) >= target, timeout=30 + more * self.every)

    def wrong(self) -> list[str]:
        return [why for _, why in self.done if why is not None]

    def __enter__(self) -> Repeated:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


# ------------------------------------------------------------------- 1. a team's objects, left alone


def test_a_teams_objects_under_generated_names_survive_changes_kills_restarts_and_deletion(
    kube: Kube, namespace: str, run_operator: Callable[..., LocalOperator], record: dict[str, Any]
) -> None:
    """A team's Service, HPA, NetworkPolicy, PDB, Ingress and labelled ConfigMap under the names of
    pipeline `c`'s children, made before it; the same kinds under pipeline `a`'s free names, made after it.
    Then `a` asks for an autoscaler (the team's HPA has its name), drops it again with a fresh render
    (a prune) while the operator is killed -9, the operator restarts, and `c` is deleted: none of the
    team's objects is changed or deleted (uid and resourceVersion)."""
    before_c = team_objects(namespace, "c")
    for obj in before_c:
        kube.create(obj)
    op = run_operator(FAST, endpoints=True)
    kube.apply(cluster_doc("c", namespace))
    doc = cluster_doc("a", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "c")
    wait_reconciled(kube, namespace, "a")
    after_a = [
        o
        for o in team_objects(namespace, "a")
        if kube.get(o["apiVersion"], o["kind"], namespace, o["metadata"]["name"]) is None
    ]
    names_a = {f"{kind}/{name}" for _, kind, name in generated_names("a")}
    assert {f"{o['kind']}/{o['metadata']['name']}" for o in after_a} & names_a, "no generated name left"
    for obj in after_a:
        kube.create(obj)
    team = before_c + after_a
    before = snapshot(kube, team)
    record["team_objects"] = len(team)

    try:
        # `a` asks for an HPA of the team's name: reported, not taken
        doc["spec"]["autoscaling"] = {"maxReplicas": 2}
        kube.apply(doc)
        wait_reconciled(kube, namespace, "a", 2)
        owned = wait_for(
            "a reports the team's HPA",
            lambda: (lambda c: c if c and "HorizontalPodAutoscaler a" in c["message"] else None)(
                condition(get_cr(kube, namespace, "a"), OWNED)
            ),
        )
        assert owned["reason"] == NAME_TAKEN, owned
        # ... and drops it with a fresh render (a prune) while the operator is killed and started again
        del doc["spec"]["autoscaling"]
        doc["spec"]["pipelines"][0]["fanOut"] = "shared"
        kube.apply(doc)
        op.kill9()
        op = run_operator(FAST, endpoints=True)
        wait_reconciled(kube, namespace, "a", 3)
        wait_resyncs(op)
        op.stop()
        op = run_operator(FAST, endpoints=True)
        wait_resyncs(op)
        kube.delete(API, "TritonPipeline", namespace, "c")
        wait_for("c gone", lambda: kube.get(API, "TritonPipeline", namespace, "c") is None)
        wait_resyncs(op)
        record.update(spec_changes=2, operator_kills=1, operator_restarts=1, pipelines_deleted=1)
    finally:  # what happened to the team's objects, however far the scenario got
        changed, deleted = changed_and_deleted(before, snapshot(kube, team))
        record.update(others_changed=len(changed), others_deleted=len(deleted))
    assert not changed and not deleted, (changed, deleted)
    assert "reconcile error" not in op.text()


# ---------------------------------------------------------------------- 2. colliding names, no fight


def test_pipelines_whose_names_collide_do_not_flap_through_changes_and_a_kill(
    kube: Kube, namespace: str, run_operator: Callable[..., LocalOperator], record: dict[str, Any]
) -> None:
    """Pipeline `b` (Header routing: headless Service `b-headless`) first, then pipeline `b-headless`
    (its Service: `b-headless`). The loser's spec changes three times, the operator is killed -9 and
    started again between: the headless Service keeps its resourceVersion (never written: no flapping),
    still selects b's pods, and the loser says why in ObjectsOwned every time."""
    op = run_operator(FAST, endpoints=True)
    headless = header_routed(kube, namespace, "b")
    before = snapshot(kube, [headless])

    loser = cluster_doc("b-headless", namespace)
    kube.apply(loser)
    changes = [
        lambda d: d["spec"]["server"].update(replicas=2),
        lambda d: d["spec"]["pipelines"][0].update(fanOut="shared"),
        lambda d: d["spec"]["server"].update(replicas=3),
    ]
    try:
        for generation, change in enumerate(changes, start=2):
            wait_reconciled(kube, namespace, "b-headless", generation - 1)
            owned = condition(get_cr(kube, namespace, "b-headless"), OWNED)
            assert owned is not None and owned["status"] == "False", owned
            taken = "Service b-headless exists and is not this pipeline's (controlled by TritonPipeline/b)"
            assert taken in owned["message"], owned
            change(loser)
            kube.apply(loser)
            if generation == 3:
                op.kill9()
                op = run_operator(FAST, endpoints=True)
        wait_reconciled(kube, namespace, "b-headless", 1 + len(changes))
        wait_resyncs(op, 3)
        record.update(loser_spec_changes=len(changes), operator_kills=1)
    finally:  # what happened to the headless Service, however far the scenario got
        changed, deleted = changed_and_deleted(before, snapshot(kube, [headless]))
        now = kube.get("v1", "Service", namespace, "b-headless") or {"metadata": {}}
        moved = now["metadata"].get("resourceVersion") != headless["metadata"]["resourceVersion"]
        record.update(
            others_changed=len(changed), others_deleted=len(deleted), headless_resource_version_changed=moved
        )
    assert not changed and not deleted, (changed, deleted)
    assert now["spec"]["selector"]["app.kubernetes.io/instance"] == "b"
    assert "reconcile error" not in op.text()


# ------------------------------------------------------------------------- 3. a 60 s apiserver outage


def test_drift_is_undone_within_one_resync_after_a_60s_apiserver_outage(
    control_plane: Any, tmp_path: Path, record: dict[str, Any]
) -> None:
    """A private apiserver (and its etcd) stopped, gone for 60 s and started again, a team's objects beside
    the pipelines: the operator lives through it (liveness 200 after), its resync loop completes a pass soon
    after, a hand edit of a generated Service's selector is undone within one resync period, and nothing
    of the team's changed."""
    ns = OUTAGE_NAMESPACE
    with private_cluster(control_plane.binaries, tmp_path, ns) as (cp, kube):
        team = team_objects(ns, "c")
        for obj in team:
            kube.create(obj)
        env = {"TRITONPIPELINE_RESYNC_SECONDS": str(OUTAGE_RESYNC), "TRITONPIPELINE_STATUS_POLL_SECONDS": "5"}
        op = LocalOperator(cp.kubeconfig, ns, tmp_path / "operator.log", env=env, endpoints=True).start()
        with operator_log_on_failure(op):
            for name in ("vision", "c"):
                kube.apply(cluster_doc(name, ns))
            for name in ("vision", "c"):
                wait_reconciled(kube, ns, name)
            before = snapshot(kube, team)
            rendered, _ = hand_edit_selector(kube, "vision")
            edited = time.monotonic()
            wait_for(
                "the edit undone", lambda: selector(kube, "vision") == rendered, timeout=3 * OUTAGE_RESYNC
            )
            record["drift_repair_before_outage_s"] = round(time.monotonic() - edited, 2)

            stopping = time.monotonic()
            cp.stop(timeout=2)  # SIGTERM; its graceful shutdown waits on the watches: SIGKILL after 2 s
            record["apiserver_stop_s"] = round(time.monotonic() - stopping, 2)
            time.sleep(OUTAGE_SECONDS)
            starting = time.monotonic()
            cp.start()
            back, back_wall = time.monotonic(), time.time()
            record["apiserver_start_s"] = round(back - starting, 2)
            record.update(outage_s=OUTAGE_SECONDS, resync_period_s=OUTAGE_RESYNC)
            kube = Kube(cp.api_client(), "test-admin")  # the old client's pooled connections are gone
            hand_edit_selector(kube, "vision")
            edited = time.monotonic()
            wait_for(
                "the edit undone", lambda: selector(kube, "vision") == rendered, timeout=6 * OUTAGE_RESYNC
            )
            repaired = time.monotonic() - edited
            record["drift_repair_after_outage_s"] = round(repaired, 2)
            record["apiserver_back_to_repaired_s"] = round(time.monotonic() - back, 2)
            assert repaired <= OUTAGE_RESYNC + 5, repaired  # one resync period, and the pass itself
            wait_for(
                "the resync pass recorded again",
                lambda: last_passes(op).get("resync", 0) > back_wall,
                timeout=3 * OUTAGE_RESYNC,
            )
            assert op.alive() and op.healthz() == 200

            changed, deleted = changed_and_deleted(before, snapshot(kube, team))
            record.update(others_changed=len(changed), others_deleted=len(deleted))
            assert not changed and not deleted, (changed, deleted)


# ------------------------------------------------------------------------------- 4. kill -9 mid-apply

CUT_KINDS = (
    (API, "TritonPipeline"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
)


def cut(kube: Kube, namespace: str) -> dict[str, list[dict[str, Any]]]:
    """Every pipeline, Deployment, Service, ConfigMap and Secret of the namespace as of one revision of
    etcd (each list after the first at its resourceVersion, resourceVersionMatch=Exact): a consistent cut,
    which no write falls in the middle of."""
    found: dict[str, list[dict[str, Any]]] = {}
    query: list[tuple[str, str]] = []
    for api, kind in CUT_KINDS:
        listed = kube.request("GET", path(api, kind, namespace), query=query)
        if not query:  # the others as of this list's revision
            revision = listed["metadata"]["resourceVersion"]
            query = [("resourceVersion", revision), ("resourceVersionMatch", "Exact")]
        found[kind] = listed.get("items") or []
    return found


def configmaps_mounted(deployment: dict[str, Any]) -> set[str]:
    """The ConfigMaps the Deployment's pod template names (volumes, projected sources, env)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("configMap", "configMapRef", "configMapKeyRef") and isinstance(value, dict):
                    found.add(str(value["name"]))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(deployment["spec"]["template"])
    return found


def mount_problems(objects: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The Deployments of a `cut` whose pods would not load the repository their template was rendered
    for: a ConfigMap they mount missing, or the mounted set incomplete, of two versions or of another
    digest than the template's (read as the init container reads it: render/packing.py `unpack`)."""
    configmaps = {c["metadata"]["name"]: c for c in objects["ConfigMap"]}
    problems = []
    for deployment in objects["Deployment"]:
        name = deployment["metadata"]["name"]
        mounted = sorted(configmaps_mounted(deployment))
        missing = [n for n in mounted if n not in configmaps]
        if missing:
            problems.append(f"Deployment/{name} mounts ConfigMaps that do not exist: {missing}")
            continue
        want = deployment["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION]
        try:
            got = unpack(entries_of(configmaps[n] for n in mounted)).digest
        except SpecError as exc:
            problems.append(f"Deployment/{name}: {exc}")
            continue
        if got != want:
            problems.append(f"Deployment/{name}: its ConfigMaps hold repository {got}, its template {want}")
    return problems


def child_problems(objects: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    """The children of a `cut` against its pipelines: `orphans` (no pipeline there controls it, by UID),
    `duplicates` (a pipeline's ConfigMap its Deployment does not mount, a second Deployment or Secret),
    `half_applied` (a pipeline without its Deployment or Service, and every `mount_problems`)."""
    pipelines = {p["metadata"]["name"]: p["metadata"]["uid"] for p in objects["TritonPipeline"]}
    problems: dict[str, list[str]] = {"orphans": [], "duplicates": []}
    problems["half_applied"] = mount_problems(objects)
    mine: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in pipelines}
    for kind, items in objects.items():
        for obj in items if kind != "TritonPipeline" else ():
            ref = controller(obj) or {}
            if ref.get("kind") != "TritonPipeline" or pipelines.get(ref.get("name", "")) != ref.get("uid"):
                problems["orphans"].append(f"{kind}/{obj['metadata']['name']}")
                continue
            mine[ref["name"]].setdefault(kind, []).append(obj)
    for pipeline, kinds in mine.items():
        deployments, services = kinds.get("Deployment", []), kinds.get("Service", [])
        secrets, configmaps = kinds.get("Secret", []), kinds.get("ConfigMap", [])
        if len(deployments) != 1 or not services:
            problems["half_applied"].append(
                f"{pipeline}: {len(deployments)} Deployment(s), {len(services)} Service(s)"
            )
        if len(deployments) > 1 or len(secrets) > 1:
            problems["duplicates"].append(
                f"{pipeline}: {len(deployments)} Deployment(s), {len(secrets)} Secret(s)"
            )
        mounted = configmaps_mounted(deployments[0]) if deployments else set()
        problems["duplicates"] += [
            f"{pipeline}: ConfigMap/{c['metadata']['name']} not mounted"
            for c in configmaps
            if c["metadata"]["name"] not in mounted
        ]
    return problems


def test_kill_9_mid_apply_leaves_no_half_applied_duplicate_or_orphan_child(
    kube: Kube, namespace: str, run_operator: Callable[..., LocalOperator], record: dict[str, Any]
) -> None:
    """20 pipelines created at once, the operator killed -9 as soon as the first Deployment exists (the
    others' applies under way), started again; then every pipeline's repository changed at once, the
    operator killed -9 as soon as the first Deployment switches, started again. Each time every pipeline
    converges with exactly its children; and at no moment, kills included, does a Deployment mount
    ConfigMaps other than those its template was rendered for (consistent cuts of etcd, every 20 ms)."""
    names = [f"p{i:02d}" for i in range(20)]
    docs = [cluster_doc(name, namespace) for name in names]

    def generation(n: int) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in kube.list(API, "TritonPipeline", namespace, "")
            if (p.get("status") or {}).get("observedGeneration") == n == p["metadata"]["generation"]
        ]

    def digests() -> dict[str, str]:
        return {
            d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION]
            for d in kube.list("apps/v1", "Deployment", namespace, "")
        }

    record["pipelines"] = len(names)
    looks = Repeated(lambda _: "; ".join(mount_problems(cut(kube, namespace))) or None, 0.02)
    with looks:
        for n, phase in ((1, "create"), (2, "update")):
            op = run_operator()
            before = digests()
            if n == 2:
                for doc in docs:  # a second instance of head_b: a new repository for every pipeline
                    doc["spec"]["models"][1]["instances"] = [{"kind": "GPU", "count": 2}]
            for doc in docs:
                kube.apply(doc)
            wait_for(
                f"the first Deployment {phase}d",
                lambda before=before: any(before.get(k) != v for k, v in digests().items()),
                timeout=60,
                interval=0.02,
            )
            op.kill9()
            killed = time.monotonic()
            at_kill = cut(kube, namespace)
            record[f"{phase}_killed_with_deployments_done"] = sum(
                before.get(k) != v for k, v in digests().items()
            )
            record[f"{phase}_killed_with_pipelines_done"] = len(generation(n))
            assert record[f"{phase}_killed_with_pipelines_done"] < len(names), "not killed mid-apply"
            record[f"{phase}_half_applied_at_kill"] = len(mount_problems(at_kill))
            run_operator()
            wait_for(f"every pipeline at generation {n}", lambda n=n: len(generation(n)) == len(names), 90)
            record[f"{phase}_converged_after_kill_s"] = round(time.monotonic() - killed, 2)
            problems = child_problems(cut(kube, namespace))
            for kind, found in problems.items():
                record[f"{phase}_{kind}"] = len(found)
            assert problems == {"orphans": [], "duplicates": [], "half_applied": []}, problems
            assert sorted(digests()) == names
    record.update(mount_cuts=len(looks.done), mount_cuts_inconsistent=len(looks.wrong()))
    assert len(looks.done) > 10, looks.done  # it did look
    assert not looks.wrong(), looks.wrong()[:3]


# -------------------------------------------------------------------- 5. leader failover under churn


def test_the_standby_takes_over_under_churn_and_every_pipeline_converges_to_its_last_spec(
    kube: Kube,
    namespace: str,
    replicas: Callable[[str], LocalOperator],  # noqa: F811  (the fixture imported above)
    record: dict[str, Any],
) -> None:
    """Two replicas in kopf's peering; pipelines created and their replicas changed every 0.25 s; the active
    replica killed -9 in the middle. The standby takes over once the killed one's entry expires, the two
    are never active at once, and every pipeline ends reconciled at the spec last written."""
    peering_in(kube, namespace)
    names = [f"f{i}" for i in range(6)]
    last: dict[str, int] = {}

    def write(i: int) -> None:
        name = names[i % len(names)]
        doc = cluster_doc(name, namespace)
        doc["spec"]["server"]["replicas"] = 1 + (i // len(names)) % 4
        kube.apply(doc)
        last[name] = doc["spec"]["server"]["replicas"]

    with ActiveSampler() as sampler:
        a = replicas("replica-a")
        sampler.add("replica-a", a)
        wait_for("replica-a active", logged(a, "replica replica-a is now the active reconciler"), 60)
        b = replicas("replica-b")
        sampler.add("replica-b", b)
        wait_for("replica-b standby", logged(b, "replica replica-b is standby"), 60)
        with Repeated(write, 0.25) as churn:
            churn.wait(2 * len(names))
            wait_for("a reconciles", lambda: kube.list("apps/v1", "Deployment", namespace, ""))
            killed = time.monotonic()
            a.kill9()
            took = wait_for("replica-b active", lambda: sampler.first("replica-b", killed), 30)
            churn.wait(2 * len(names))
        written = churn.done[-1][0]
        record.update(writes=len(churn.done), writes_refused=len(churn.wrong()))
        record["takeover_s"] = round(took - killed, 2)

        def behind() -> list[str]:
            late = []
            for name in names:
                cr = get_cr(kube, namespace, name)
                deployment = kube.get("apps/v1", "Deployment", namespace, name) or {}
                at = (cr.get("status") or {}).get("observedGeneration") == cr["metadata"]["generation"]
                if not at or (deployment.get("spec") or {}).get("replicas") != last[name]:
                    late.append(name)
            return late

        wait_for("every pipeline at its last spec", lambda: not behind(), timeout=60)
        record["converge_after_last_write_s"] = round(time.monotonic() - written, 2)
    assert not churn.wrong(), churn.wrong()
    assert LIFETIME - 2 <= record["takeover_s"] <= LIFETIME + 10, record
    worst = max(sampler.samples, key=lambda s: sum(s[1].values()))
    record["most_active_at_once"] = sum(worst[1].values())
    assert record["most_active_at_once"] <= 1, f"two replicas active at once: {worst}"


# -------------------------------------------------------------- 6. a rolling upgrade across the skew

# the outcome line of a reconcile that marked the pipeline invalid (log_events.RECONCILE_INVALID)
INVALID_LINE = re.compile(rf"\[{SKEW_NAMESPACE}/([^\]]+)\] reconcile invalid ")
WEBHOOK_FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"
WEBHOOK_CALLS = "apiserver_admission_webhook_admission_duration_seconds"


def webhook_counters(cp: Any) -> dict[str, float]:
    """From the apiserver's /metrics: the validating webhooks' calls, and the calls that failed and were
    let through (failurePolicy Ignore: a write nobody checked)."""
    status, text = cp.get("/metrics", timeout=30)
    assert status == 200, text[:200]
    found = {"calls": 0.0, "fail_open": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("type") != "validating":
                continue
            if sample.name == WEBHOOK_CALLS + "_count":
                found["calls"] += sample.value
            elif sample.name in (WEBHOOK_FAIL_OPEN, WEBHOOK_FAIL_OPEN + "_total"):
                found["fail_open"] += sample.value
    return found


def test_a_rolling_upgrade_across_the_crd_skew_refuses_no_write_and_marks_no_pipeline_invalid(
    control_plane: Any, tmp_path: Path, record: dict[str, Any]
) -> None:
    """The old replica (this tree's operator standing for the previous release) serves and reconciles; the
    newer CRD is applied (docs/how-to/upgrade.md's first step); the new replica starts beside it (kopf's
    peering: standby; each replica registers its own webhook configuration, so while both run every write
    is reviewed by both); the old one stops (its configuration goes with it, as a terminating pod leaves
    its Service) and the new one takes over. Creates and spec updates every 0.3 s throughout: none
    refused, none let through unchecked (no webhook call failed open), no pipeline ever marked invalid."""
    ns = SKEW_NAMESPACE
    with helm_installed(control_plane.binaries, tmp_path) as (cp, kube):
        peering_in(kube, ns)
        stored = STORED
        started: list[OperatorProcess] = []

        def replica(identity: str) -> OperatorProcess:
            log = tmp_path / f"{identity}.log"
            op = start_webhook_operator(
                cp.kubeconfig, kube, ns, log, f"tp-skew-{identity}", "Ignore", replica_env(identity)
            )
            started.append(op)
            return op

        newer = threading.Event()  # the newer CRD is served: writes may carry its fields
        made: list[str] = list(stored)

        def write(i: int) -> str | None:
            if i % 2 == 0:
                name = f"w{i:03d}"
                doc = cluster_doc(name, ns, "diamond")
                status, body, _ = create(kube, ns, with_future_fields(doc) if newer.is_set() else doc)
                if status < 300:
                    made.append(name)
            else:
                name = made[(i // 2) % len(made)]
                patch = {"spec": {"server": {"replicas": 1 + i % 3}}}
                status, body, _ = merge_patch(kube, f"{collection(ns)}/{name}", patch)
            return None if status < 300 else f"{status} {body.get('message', body)}"

        try:
            old = replica("old")
            wait_for("old active", logged(old, "replica old is now the active reconciler"), 60)
            for name in stored:
                wait_reconciled(kube, ns, name)
            before = {name: skew_snapshot(kube, name) for name in stored}
            counted = webhook_counters(cp)
            with Repeated(write, 0.3) as churn:
                churn.wait(4)
                kubectl_server_side_apply(kube, newer_crd(), force=True)  # the upgrade how-to's first step
                wait_established(kube, CRD_NAME)
                newer.set()
                churn.wait(4)
                new = replica("new")  # the rolling update's surge pod
                wait_for("new standby", logged(new, "replica new is standby"), 60)
                overlap = len(churn.done)
                churn.wait(8)
                record["writes_with_both_replicas"] = len(churn.done) - overlap
                both = webhook_counters(cp)
                record["webhook_calls_failed_open_with_both"] = int(both["fail_open"] - counted["fail_open"])
                # the old pod terminates: out of its Service first (here: its configuration), then stopped
                kube.delete(
                    "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", None, "tp-skew-old"
                )
                stopped = utc_now()
                assert old.stop() == 0
                wait_for("new active", logged(new, "replica new is now the active reconciler"), 30)
                active = logged_at(new, "replica new is now the active reconciler")
                assert active is not None
                record["takeover_s"] = round((active - stopped).total_seconds(), 2)
                churn.wait(6)
            counters = webhook_counters(cp)
            record.update(
                writes=len(churn.done),
                writes_refused=len(churn.wrong()),
                webhook_calls=int(counters["calls"] - counted["calls"]),
                webhook_calls_failed_open=int(counters["fail_open"] - counted["fail_open"]),
                pipelines=len(made),
            )
            for name in made:
                wait_reconciled(kube, ns, name)
            # marked invalid at any time: now, by a reconcile's outcome line, or by its Warning event
            marked = {
                n for n in made if (condition(get_cr(kube, ns, n), "SpecValid") or {}).get("status") != "True"
            }
            marked |= {m.group(1) for op in started for m in INVALID_LINE.finditer(op.text())}
            events = kube.list("v1", "Event", ns, "")
            marked |= {e["involvedObject"].get("name") for e in events if e.get("reason") == "InvalidSpec"}
            record["pipelines_marked_invalid"] = len(marked)
            assert not churn.wrong(), churn.wrong()
            assert record["webhook_calls_failed_open"] == 0, record
            assert not marked, sorted(marked)
            for name in stored:  # SpecValid never flipped (its lastTransitionTime), the same children
                after, first = skew_snapshot(kube, name), before[name]
                assert after["valid"]["lastTransitionTime"] == first["valid"]["lastTransitionTime"], name
                assert after["children"] == first["children"], name
            assert not any("Traceback" in op.text() for op in started)
        except BaseException:
            for op in started:
                print(f"\n===== {op.log.name} =====\n{op.text()[-6000:]}")
            raise
        finally:
            for op in started:
                op.stop()
