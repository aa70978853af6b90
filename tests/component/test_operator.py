"""The operator as a real subprocess against a real kube-apiserver + etcd (no kubelet: pods never run)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from harness.kubeapi import schemaless_crd, write_status
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import CLI, cluster_doc, condition, contained, example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
from tritonpipeline.compiler.router_choice import choose_router
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.render.crd import crd
from tritonpipeline.render.manifests import HASH_ANNOTATION, render_children
from tritonpipeline.render.packing import entries_of, unpack
from tritonpipeline.render.security_context import OPENSHIFT_SCC_API
from tritonpipeline.settings import GROUP, Settings
from tritonpipeline.spec import parse_pipeline

API = "serving.tritonpipeline.io/v1alpha1"
SELECTOR = "serving.tritonpipeline.io/pipeline"

pytestmark = pytest.mark.apiserver


@contextmanager
def private_cluster(binaries: Any, workdir: Path, namespace: str) -> Iterator[tuple[Any, Kube]]:
    """A private kube-apiserver + etcd for a test that stops it or installs CRDs the shared one must not
    have: the TritonPipeline CRD established and `namespace` created; stopped afterwards."""
    from harness.controlplane import ControlPlane

    cp = ControlPlane(workdir / "cp", binaries).start()
    try:
        k = Kube(cp.api_client(), "test-admin")
        k.apply(crd())
        wait_for("the CRD", lambda: k.resource_exists(API, "TritonPipeline"))
        k.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        yield cp, k
    finally:
        cp.stop()


@contextmanager
def operator_log_on_failure(op: Any) -> Iterator[None]:
    """Stop `op` afterwards; print the tail of its log when the block failed."""
    try:
        yield
    except BaseException:
        print(f"\n===== operator log =====\n{op.text()[-6000:]}")
        raise
    finally:
        op.stop()


def rendered(doc: dict[str, Any]) -> Any:
    """The children the operator renders for `doc` (with its router choice and default settings)."""
    tp = parse_pipeline(doc)
    return render_children(tp, compile_pipeline(tp, router=choose_router(tp)), Settings())


def get_cr(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    cr = kube.get(API, "TritonPipeline", ns, name)
    assert cr is not None
    return cr


def children(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return {
        "configmaps": sorted(
            kube.list("v1", "ConfigMap", ns, f"{SELECTOR}={name}"), key=lambda c: c["metadata"]["name"]
        ),
        "deployment": kube.get("apps/v1", "Deployment", ns, name),
        "service": kube.get("v1", "Service", ns, name),
        "hpa": kube.get("autoscaling/v2", "HorizontalPodAutoscaler", ns, name),
    }


def wait_reconciled(kube: Kube, ns: str, name: str, generation: int | None = None) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        cr = get_cr(kube, ns, name)
        want = generation or cr["metadata"]["generation"]
        st = cr.get("status") or {}
        return cr if st.get("observedGeneration") == want and condition(cr, "SpecValid") else None

    return wait_for(f"{ns}/{name} to be reconciled", done)


def configmap_files(cms: list[dict[str, Any]]) -> dict[str, bytes]:
    return unpack(entries_of(cms)).files


def patch_deployment_status(kube: Kube, ns: str, name: str, status: dict[str, Any]) -> None:
    """Write a Deployment's status as kube-controller-manager would (no controller runs here)."""
    write_status(
        kube,
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": ns, "name": name}},
        status,
    )


def events(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return [e for e in kube.list("v1", "Event", ns, "") if e["involvedObject"].get("name") == name]


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("source", ["fanout", "diamond", "streaming"])
def test_example_children_match_the_compiled_pipeline(kube, namespace, run_operator, source):
    run_operator()
    doc = cluster_doc(source, namespace, source)
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, source)
    kids = children(kube, namespace, source)
    tp = parse_pipeline(doc)
    # the routers on what the operator chooses for this image (its setting left at auto): native
    artifacts = compile_pipeline(tp, router=choose_router(tp))
    assert artifacts.router_backend == "native" or not artifacts.plan.routers
    # ConfigMaps carry exactly the compiled repository
    assert configmap_files(kids["configmaps"]) == artifacts.files
    dep = kids["deployment"]
    pod = dep["spec"]["template"]["spec"]
    triton = pod["containers"][0]
    assert dep["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION] == artifacts.digest()
    assert dep["spec"]["replicas"] == doc["spec"]["server"].get("replicas", 1)
    assert {p["containerPort"] for p in triton["ports"]} == {8000, 8001, 8002}
    if source == "streaming":  # stateful: readiness also fails while preStop drains the pod
        assert "/v2/health/ready" in triton["readinessProbe"]["exec"]["command"][-1]
        assert "preStop" in triton["lifecycle"]
    else:
        assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert triton["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert triton["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    gpus = doc["spec"]["server"].get("gpus", 1)
    limits = (triton.get("resources") or {}).get("limits") or {}
    tolerations = pod.get("tolerations") or []
    if gpus:
        assert limits["nvidia.com/gpu"] == str(gpus)
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    else:
        assert "nvidia.com/gpu" not in limits and not tolerations
    init = pod["initContainers"][0]
    assert init["args"][:1] == ["assemble"] and "/tp/source/triton" in init["args"]
    claim = next(v for v in pod["volumes"] if v["name"] == "source")["persistentVolumeClaim"]
    assert claim == {"claimName": "models", "readOnly": True}
    assert {p["port"] for p in kids["service"]["spec"]["ports"]} == {8000, 8001, 8002}
    # status: conditions, endpoint, graph summary with the inserted routers
    st = cr["status"]
    assert condition(cr, "SpecValid")["status"] == "True"
    assert condition(cr, "ModelsConfigured")["status"] == "True"
    assert condition(cr, "Ready")["status"] == "False"  # no kubelet: no pod is ever ready
    assert st["endpoint"] == f"{source}.{namespace}.svc:8001"
    assert [r["name"] for r in st["graph"]["routers"]] == [r.name for r in artifacts.plan.routers]
    wait_for(
        "a Created event", lambda: any(e["reason"] == "Created" for e in events(kube, namespace, source))
    )


def test_changes_touch_exactly_the_children_that_should_change(kube, namespace, run_operator):
    run_operator()
    doc = cluster_doc("vision", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    before = children(kube, namespace, "vision")

    def rv(obj: dict[str, Any]) -> str:
        return obj["metadata"]["resourceVersion"]

    # 1. replicas: only the Deployment's replica count changes; no roll (same template hash)
    doc["spec"]["server"]["replicas"] = 3
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    after = children(kube, namespace, "vision")
    assert after["deployment"]["spec"]["replicas"] == 3
    assert after["deployment"]["spec"]["template"] == before["deployment"]["spec"]["template"]
    assert [rv(c) for c in after["configmaps"]] == [rv(c) for c in before["configmaps"]]
    assert rv(after["service"]) == rv(before["service"])
    wait_for(
        "an Updated event", lambda: any(e["reason"] == "Updated" for e in events(kube, namespace, "vision"))
    )

    # 2. adding a model changes the repository: ConfigMap and the pod template hash (pods roll)
    extra = copy.deepcopy(doc["spec"]["models"][1])
    extra["name"] = "head_d"
    doc["spec"]["models"].append(extra)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 3)
    added = children(kube, namespace, "vision")
    assert "head_d/config.pbtxt" in configmap_files(added["configmaps"])
    h = HASH_ANNOTATION
    old_hash = after["deployment"]["spec"]["template"]["metadata"]["annotations"][h]
    assert added["deployment"]["spec"]["template"]["metadata"]["annotations"][h] != old_hash
    assert rv(added["service"]) == rv(before["service"])

    # 3. fanOut router -> shared: the router disappears from the repository and from status
    doc["spec"]["pipelines"][0]["fanOut"] = "shared"
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision", 4)
    shared = children(kube, namespace, "vision")
    files = configmap_files(shared["configmaps"])
    assert not any(p.endswith("__router/config.pbtxt") for p in files)
    assert cr["status"]["graph"]["routers"] == []
    assert shared["hpa"] is None

    # 4. autoscaling adds an HPA (and the Deployment stops setting replicas); removing it deletes the HPA
    doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 4, "metric": "queueTime", "target": 50}
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 5)
    auto = children(kube, namespace, "vision")
    assert auto["hpa"]["spec"]["maxReplicas"] == 4
    assert auto["hpa"]["spec"]["scaleTargetRef"]["name"] == "vision"
    del doc["spec"]["autoscaling"]
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 6)
    assert children(kube, namespace, "vision")["hpa"] is None


def test_invalid_update_keeps_the_last_good_state(kube, namespace, run_operator):
    run_operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    doc = cluster_doc("vision", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    before = children(kube, namespace, "vision")
    bad = copy.deepcopy(doc)
    bad["spec"]["pipelines"][0]["steps"][1]["inputs"] = {"FEATS_IN_B": "rigth.FEATS_A"}  # passes admission
    kube.apply(bad)
    cr = wait_reconciled(kube, namespace, "vision", 2)
    valid = condition(cr, "SpecValid")
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.pipelines[0].steps[1].inputs.FEATS_IN_B: unknown step 'rigth'" in valid["message"]
    assert condition(cr, "Ready")["status"] == "False"
    warning = wait_for(
        "an InvalidSpec Warning event",
        lambda: [
            e
            for e in events(kube, namespace, "vision")
            if e["type"] == "Warning" and e["reason"] == "InvalidSpec"
        ],
    )
    assert "rigth" in warning[0]["message"]
    time.sleep(3)  # give a wrong operator time to touch something: three resyncs
    # one Warning for the change, none for each resync that finds the same problem (one a minute, before)
    assert len([e for e in events(kube, namespace, "vision") if e["reason"] == "InvalidSpec"]) == 1
    after = children(kube, namespace, "vision")
    assert json.dumps(after, sort_keys=True) == json.dumps(
        before, sort_keys=True
    )  # nothing rolled or deleted
    # fixing the spec recovers, and SpecValid flips back
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision", 3)
    assert condition(cr, "SpecValid")["status"] == "True"


def _deployment_policy(
    kube: Kube, namespace: str, policy: str, admission: dict[str, Any], probe: dict[str, Any], words: str
) -> Callable[[], None]:
    """A ValidatingAdmissionPolicy (the apiserver's own CEL admission, as a policy engine would) on the
    Deployments created or changed in `namespace`: `admission` holds its validations (and variables).
    Waits until it refuses the `probe` pod template with `words`; returns what lifts it."""
    base = "/apis/admissionregistration.k8s.io/v1"
    objects = [
        (
            f"{base}/validatingadmissionpolicies/{policy}",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": policy},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": ["apps"],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["deployments"],
                            }
                        ]
                    },
                    **admission,
                },
            },
        ),
        (
            f"{base}/validatingadmissionpolicybindings/{policy}",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": policy},
                "spec": {
                    "policyName": policy,
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                    },
                },
            },
        ),
    ]
    apply = [("fieldManager", "test"), ("force", "true")]
    for url, obj in objects:
        kube.request("PATCH", url, query=apply, body=obj, content_type="application/apply-patch+yaml")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {"metadata": {"labels": {"app": "probe"}}, "spec": probe},
        },
    }

    def refused() -> bool:  # the policy is in force once the apiserver's admission has loaded it
        try:
            kube.request(
                "POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", query=[("dryRun", "All")],
                body=deployment, retries=0,
            )  # fmt: skip
        except KubeError as err:
            return words in err.message
        return False

    wait_for("the admission policy to refuse Deployments", refused)

    def lift() -> None:
        for url, _ in reversed(objects):
            kube.request("DELETE", url)

    return lift


def _refuse_deployments(kube: Kube, namespace: str, message: str) -> Callable[[], None]:
    """A policy that refuses every Deployment created or changed in `namespace`; returns what lifts it."""
    admission = {"validations": [{"expression": "false", "message": message}]}
    probe = {"containers": [{"name": "c", "image": "probe"}]}
    return _deployment_policy(kube, namespace, f"refuse-deployments-{namespace}", admission, probe, message)


def test_a_refused_apply_is_reported_in_status_and_retried(kube, namespace, run_operator):
    """The apiserver refuses the Deployment (an admission policy here; a policy engine, a quota or a
    field an older Kubernetes does not know elsewhere): the pipeline's status and a Warning event say
    which object and why, an update leaves what serves as it is, and once the refusal is lifted the
    next retry applies."""

    def up_to_date(words: str = "", status: str = "False") -> dict[str, Any] | None:
        return _up_to_date(kube, namespace, "vision", status, words)

    def replicas() -> int | None:
        deployment = children(kube, namespace, "vision")["deployment"]
        return deployment["spec"]["replicas"] if deployment else None

    run_operator()
    lift = _refuse_deployments(kube, namespace, "images must come from the approved registry")
    doc = cluster_doc("vision", namespace)
    kube.apply(doc)
    cr = wait_for("UpToDate=False naming the policy", lambda: up_to_date("approved registry"))
    refused = condition(cr, "UpToDate")
    assert refused["reason"] == "ApplyRefused"
    assert "Deployment vision" in refused["message"]
    ready = condition(cr, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ApplyRefused")
    assert condition(cr, "SpecValid")["status"] == "True"
    assert cr["status"]["observedGeneration"] == 1
    warning = wait_for(
        "an ApplyRefused Warning event",
        lambda: [e for e in events(kube, namespace, "vision") if e["reason"] == "ApplyRefused"],
    )
    assert "approved registry" in warning[0]["message"]
    assert replicas() is None
    lift()
    cr = wait_for("the retry to apply", lambda: up_to_date(status="True"), timeout=40)
    assert condition(cr, "Ready")["reason"] != "ApplyRefused"
    before = replicas()
    assert before is not None and before != 3
    # an update the apiserver refuses: the Deployment stays as it was, Ready is not touched
    lift = _refuse_deployments(kube, namespace, "no changes during the freeze")
    doc["spec"]["server"]["replicas"] = 3
    kube.apply(doc)
    cr = wait_for("the update's refusal", lambda: up_to_date("freeze"))
    assert cr["status"]["observedGeneration"] == 2
    assert condition(cr, "Ready")["reason"] != "ApplyRefused"
    assert replicas() == before
    lift()
    wait_for("the update to apply", lambda: replicas() == 3, timeout=40)


# OpenShift's restricted-v2 SCC, the rule that matters here: every uid and fsGroup a pod names must lie in
# the ranges OpenShift writes on each namespace (START/SIZE); it then fills in the ids a pod leaves out
UID_RANGE, GROUP_RANGE = "openshift.io/sa.scc.uid-range", "openshift.io/sa.scc.supplemental-groups"
RESTRICTED_V2_IDS = {
    "variables": [
        {"name": "pod", "expression": "object.spec.template.spec"},
        {"name": "ns", "expression": "namespaceObject.metadata.annotations"},
        {"name": "uids", "expression": f"variables.ns['{UID_RANGE}'].split('/')"},
        {"name": "gids", "expression": f"variables.ns['{GROUP_RANGE}'].split('/')"},
        {"name": "uidMin", "expression": "int(variables.uids[0])"},
        {"name": "uidMax", "expression": "int(variables.uids[0]) + int(variables.uids[1]) - 1"},
        {"name": "gidMin", "expression": "int(variables.gids[0])"},
        {"name": "gidMax", "expression": "int(variables.gids[0]) + int(variables.gids[1]) - 1"},
        {
            "name": "containers",
            "expression": "variables.pod.containers + "
            "(has(variables.pod.initContainers) ? variables.pod.initContainers : [])",
        },
    ],
    "validations": [
        {
            "expression": "!has(variables.pod.securityContext) "
            "|| !has(variables.pod.securityContext.runAsUser) "
            "|| (variables.pod.securityContext.runAsUser >= variables.uidMin "
            "&& variables.pod.securityContext.runAsUser <= variables.uidMax)",
            "messageExpression": "'unable to validate against any security context constraint: provider "
            "restricted-v2: .spec.securityContext.runAsUser: Invalid value: ' + "
            "string(variables.pod.securityContext.runAsUser) + ': must be in the ranges: [' + "
            "string(variables.uidMin) + ', ' + string(variables.uidMax) + ']'",
        },
        {
            "expression": "!has(variables.pod.securityContext) "
            "|| !has(variables.pod.securityContext.fsGroup) "
            "|| (variables.pod.securityContext.fsGroup >= variables.gidMin "
            "&& variables.pod.securityContext.fsGroup <= variables.gidMax)",
            "messageExpression": "'unable to validate against any security context constraint: provider "
            "restricted-v2: .spec.securityContext.fsGroup: Invalid value: ' + "
            "string(variables.pod.securityContext.fsGroup) + ' is not an allowed group'",
        },
        {
            "expression": "variables.containers.all(c, !has(c.securityContext) || "
            "!has(c.securityContext.runAsUser) || (c.securityContext.runAsUser >= variables.uidMin "
            "&& c.securityContext.runAsUser <= variables.uidMax))",
            "message": "unable to validate against any security context constraint: provider restricted-v2: "
            "a container's securityContext.runAsUser: must be in the namespace's uid range",
        },
    ],
}
# OpenShift's SecurityContextConstraints API (an aggregated API there; here a CRD serves it)
SCC_CRD = schemaless_crd(*OPENSHIFT_SCC_API, "securitycontextconstraints", scope="Cluster")


@pytest.mark.parametrize("openshift", [True, False], ids=["scc-api", "no-scc-api"])
def test_on_openshift_the_platform_assigns_the_triton_pods_ids(control_plane, tmp_path, openshift):
    """OpenShift refuses a pod whose uid or fsGroup lies outside its namespace's ranges, the default 1000
    included. An operator left at `auto` asks the cluster at start-up whether it serves OpenShift's
    SecurityContextConstraints; where it does, the Triton pods name no ids (the SCC assigns them) and
    are admitted. Here a CRD serves that API (a private apiserver: the shared one must not look like
    OpenShift), and restricted-v2's id rule is a ValidatingAdmissionPolicy on the Deployment's pod
    template (SCC admission itself is OpenShift's, on pods; no kubelet runs pods here). Without the API,
    the same pipeline keeps its ids and is refused, in its status."""
    ns = "openshift-like"
    with private_cluster(control_plane.binaries, tmp_path, ns) as (cp, k):
        ranges = {UID_RANGE: "1000680000/10000", GROUP_RANGE: "1000680000/10000"}
        k.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "annotations": ranges}})
        if openshift:
            k.apply(SCC_CRD)
            wait_for("the SCC API", lambda: k.resource_exists(*OPENSHIFT_SCC_API))
        probe = {"securityContext": {"runAsUser": 1000}, "containers": [{"name": "c", "image": "probe"}]}
        _deployment_policy(k, ns, "restricted-v2-ids", RESTRICTED_V2_IDS, probe, "must be in the ranges")
        op = LocalOperator(cp.kubeconfig, ns, tmp_path / "operator.log").start()
        with operator_log_on_failure(op):
            k.apply(cluster_doc("vision", ns))
            if openshift:
                cr = wait_for(
                    "the pipeline applied", lambda: _up_to_date(k, ns, "vision", "True"), timeout=40
                )
                assert condition(cr, "UpToDate")["reason"] != "ApplyRefused"
                pod = k.get("apps/v1", "Deployment", ns, "vision")["spec"]["template"]["spec"]
                assert pod["securityContext"] == {
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                }
                for c in [*pod["initContainers"], *pod["containers"]]:
                    assert not {"runAsUser", "runAsGroup"} & set(c["securityContext"]), c["name"]
                assert "the platform assigns the Triton pods' user and group ids" in op.text()
            else:
                cr = wait_for("the refusal in status", lambda: _up_to_date(k, ns, "vision", "False"))
                refused = condition(cr, "UpToDate")
                assert refused["reason"] == "ApplyRefused"
                assert "runAsUser: Invalid value: 1000: must be in the ranges" in refused["message"]
                assert k.get("apps/v1", "Deployment", ns, "vision") is None
                assert "the platform assigns" not in op.text()


def test_an_unanswered_scc_discovery_stops_the_operator_rather_than_guess(control_plane, tmp_path):
    """On OpenShift the SCC API is aggregated (openshift-apiserver): while its server is down, discovery
    answers 503. `auto` must not take that for "not OpenShift" (the pods would carry ids the SCC refuses):
    the call is retried, then the operator exits saying why, and its pod restarts and asks again. Here an
    APIService whose Service does not exist answers so."""
    with private_cluster(control_plane.binaries, tmp_path, "aggregated") as (cp, k):
        group, version = OPENSHIFT_SCC_API[0].split("/")
        k.request(
            "PATCH",
            f"/apis/apiregistration.k8s.io/v1/apiservices/{version}.{group}",
            query=[("fieldManager", "test")],
            content_type="application/apply-patch+yaml",
            body={
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{group}"},
                "spec": {
                    "group": group,
                    "version": version,
                    "service": {"namespace": "aggregated", "name": "openshift-apiserver"},
                    "groupPriorityMinimum": 9900,
                    "versionPriority": 15,
                    "insecureSkipTLSVerify": True,
                },
            },
        )

        def unanswered() -> bool:
            try:
                k.request("GET", f"/apis/{OPENSHIFT_SCC_API[0]}", retries=0)
            except KubeError as exc:
                return exc.status == 503
            return False

        wait_for("discovery of the aggregated group to answer 503", unanswered)
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
        started = time.monotonic()
        proc = subprocess.run(
            [str(CLI), "run", "-n", "aggregated"], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 1, proc.stderr[-2000:]
        said = f"cannot tell whether the cluster serves {'/'.join(OPENSHIFT_SCC_API)}: HTTP 503"
        assert said in proc.stderr, proc.stderr[-2000:]
        assert time.monotonic() - started > 3  # retried first


def _up_to_date(kube: Kube, namespace: str, name: str, status: str, words: str = "") -> dict[str, Any] | None:
    """The pipeline once its UpToDate condition has `status` and a message with `words`."""
    cr = get_cr(kube, namespace, name)
    c = condition(cr, "UpToDate") or {}
    return cr if c.get("status") == status and words in c.get("message", "") else None


def test_children_are_owned_by_the_pipeline(kube, namespace, run_operator):
    """No kube-controller-manager runs here, so garbage collection is shown by the owner references:
    every object the operator makes for a pipeline (each kind it applies or creates) is owned by it."""
    run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["autoscaling"] = {"maxReplicas": 2}
    doc["spec"]["networkPolicy"] = {}
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision")
    kinds = [
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("policy/v1", "PodDisruptionBudget"),
        ("v1", "Secret"),
    ]
    selector = f"{SELECTOR}=vision"
    objects = [(kind, o) for api, kind in kinds for o in kube.list(api, kind, namespace, selector)]
    assert {kind for kind, _ in objects} == {kind for _, kind in kinds}
    for kind, obj in objects:
        refs = obj["metadata"]["ownerReferences"]
        assert refs == [
            {
                "apiVersion": API,
                "kind": "TritonPipeline",
                "name": "vision",
                "uid": cr["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ], f"{kind}/{obj['metadata']['name']}"
    assert "finalizers" not in cr["metadata"]  # nothing external to clean up


def test_deployment_ready_turns_the_pipeline_ready(kube, namespace, run_operator):
    run_operator()
    kube.apply(cluster_doc("vision", namespace))
    wait_reconciled(kube, namespace, "vision")
    dep = kube.get("apps/v1", "Deployment", namespace, "vision")
    status = {
        "observedGeneration": dep["metadata"]["generation"],
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
    }
    patch_deployment_status(kube, namespace, "vision", status)

    def ready() -> dict[str, Any] | None:
        cr = get_cr(kube, namespace, "vision")
        c = condition(cr, "Ready")
        return cr if c and c["status"] == "True" else None

    cr = wait_for("Ready=True", ready)
    assert cr["status"]["readyReplicas"] == 1 and cr["status"]["replicas"] == 1
    assert condition(cr, "Ready")["reason"] == "AllReplicasReady"


def test_drift_is_repaired(kube, namespace, run_operator):
    op = run_operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    kube.apply(cluster_doc("vision", namespace))
    wait_reconciled(kube, namespace, "vision")
    kube.delete("v1", "Service", namespace, "vision")
    wait_for("the Service to come back", lambda: kube.get("v1", "Service", namespace, "vision"), timeout=30)
    # a status someone else wrote is repaired too (the operator compared with what it last wrote, and
    # kept endpoint "tampered" and observedGeneration 7 until it restarted)
    kube.patch_status(namespace, "vision", {"endpoint": "tampered", "observedGeneration": 7})

    def repaired() -> dict[str, Any] | None:
        cr = kube.get(API, "TritonPipeline", namespace, "vision")
        status = (cr or {}).get("status") or {}
        return cr if status.get("observedGeneration") == 1 and status.get("endpoint") != "tampered" else None

    wait_for("the status repaired", repaired, timeout=30)
    # `kubectl set image` on the Triton container: restored (the upgrade pin took the edited template for
    # an earlier operator's rendering and kept "evil/triton:hacked")
    url = f"/apis/apps/v1/namespaces/{namespace}/deployments/vision"
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "tritonserver", "image": "evil/triton:1"}]}}}
    }
    kube.request(
        "PATCH", url, query=[("fieldManager", "kubectl-set")], body=patch,
        content_type="application/strategic-merge-patch+json",
    )  # fmt: skip

    def triton_image() -> str:
        deployment = kube.get("apps/v1", "Deployment", namespace, "vision") or {}
        containers = deployment["spec"]["template"]["spec"]["containers"]
        return str(next(c["image"] for c in containers if c["name"] == "tritonserver"))

    wait_for("the Triton image restored", lambda: triton_image() != "evil/triton:1", timeout=30)
    assert condition(get_cr(kube, namespace, "vision"), "UpToDate")["reason"] != "OperatorUpgraded"
    # what a hand edit adds, a field the operator never sets, goes too (server-side apply kept it: an env
    # var from `kubectl set env`, a capability from `kubectl edit`); the template's metadata stays
    restart = {"kubectl.kubernetes.io/restartedAt": "2026-11-28T10:00:00Z"}
    added = {
        "spec": {
            "template": {
                "metadata": {"annotations": restart},
                "spec": {
                    "containers": [
                        {
                            "name": "tritonserver",
                            "env": [{"name": "LD_PRELOAD", "value": "/tmp/evil.so"}],
                            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
                        }
                    ]
                },
            }
        }
    }
    kube.request(
        "PATCH", url, query=[("fieldManager", "kubectl-edit")], body=added,
        content_type="application/strategic-merge-patch+json",
    )  # fmt: skip

    def triton_container() -> dict[str, Any]:
        deployment = kube.get("apps/v1", "Deployment", namespace, "vision") or {}
        return next(
            c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver"
        )

    wait_for(
        "the added env var and capability removed",
        lambda: (
            not any(e["name"] == "LD_PRELOAD" for e in triton_container().get("env") or [])
            and "add" not in ((triton_container().get("securityContext") or {}).get("capabilities") or {})
        ),
        timeout=30,
    )
    template = children(kube, namespace, "vision")["deployment"]["spec"]["template"]
    assert restart.items() <= (template["metadata"].get("annotations") or {}).items()
    assert "the pod spec held what field manager(s) kubectl-edit wrote" in op.text()


def test_a_namespace_being_deleted_is_not_repaired(kube, namespace, run_operator):
    """Deleting a namespace deletes the pipeline and its children in no order: a child gone first is not
    restored (the apiserver refuses writes there with cause NamespaceTerminating), and that is no error."""
    op = run_operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    kube.apply(cluster_doc("vision", namespace))
    wait_reconciled(kube, namespace, "vision")
    # no namespace controller here: the namespace stays Terminating with its objects
    kube.delete("v1", "Namespace", None, namespace)
    kube.delete("v1", "Service", namespace, "vision")
    wait_for("the skipped repair in the log", lambda: "is being deleted" in op.text(), timeout=30)
    time.sleep(2)  # resyncs meanwhile
    assert "reconcile error" not in op.text(), op.text()[-3000:]
    assert kube.get("v1", "Service", namespace, "vision") is None


def test_oversized_configmap_is_reported_not_crashed(kube, namespace, run_operator):
    op = run_operator({"TRITONPIPELINE_CONFIGMAP_MAX_BYTES": "4096"})  # the smallest it takes
    doc = cluster_doc("vision", namespace)
    doc["spec"]["models"][0]["parameters"] = {"blob": "x" * 5000}  # one config over the limit
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision")
    valid = condition(cr, "SpecValid")
    assert valid["status"] == "False"
    assert "over the ConfigMap limit of 4096 bytes" in valid["message"]
    assert children(kube, namespace, "vision")["deployment"] is None
    assert op.proc is not None and op.proc.poll() is None  # still running


def test_a_spec_larger_than_all_annotations_may_be_is_handled_once(kube, namespace, run_operator):
    """kopf marked a pipeline handled with a copy of it in one annotation, and Kubernetes allows 256 KiB
    of annotations: a larger spec was handled as new again and again (a traceback and a Created event
    each time). The operator marks it with a digest."""
    op = run_operator()
    doc = cluster_doc("large", namespace)
    doc["spec"]["models"][0]["parameters"] = {"blob": "x" * 300_000}  # within one ConfigMap's 900 KiB
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "large")
    assert condition(cr, "SpecValid")["status"] == "True"
    assert children(kube, namespace, "large")["deployment"] is not None
    annotations = cr["metadata"].get("annotations") or {}
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 1024, annotations
    doc["spec"]["server"]["replicas"] = 2
    kube.apply(doc)
    wait_reconciled(kube, namespace, "large", generation=2)
    wait_for(
        "an Updated event", lambda: any(e["reason"] == "Updated" for e in events(kube, namespace, "large"))
    )
    time.sleep(3)  # kopf retried a failed patch within a second or two
    created = [e for e in events(kube, namespace, "large") if e["reason"] == "Created"]
    assert [e.get("count", 1) for e in created] == [1], created
    assert "Traceback" not in op.text()


def test_a_pipeline_an_earlier_release_handled_is_not_new_after_the_upgrade(kube, namespace, run_operator):
    """Releases before the digest kept kopf's copy of the handled pipeline (kopf's own
    AnnotationsDiffBaseStorage, which wrote it here): the pipeline is compared with that copy, not
    handled as new, and the copy is replaced by the digest at its next change."""
    doc = cluster_doc("kept", namespace)
    kube.apply(doc)
    earlier = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    body = kopf.Body(get_cr(kube, namespace, "kept"))
    patch = kopf.Patch()
    earlier.store(body=body, patch=patch, essence=earlier.build(body=body))
    kube.apply(
        {**{k: doc[k] for k in ("apiVersion", "kind")}, "metadata": {**doc["metadata"], **patch["metadata"]}},
        field_manager="earlier-operator",
    )
    copy_key = f"{GROUP}/last-handled-configuration"
    assert copy_key in get_cr(kube, namespace, "kept")["metadata"]["annotations"]
    run_operator()
    wait_reconciled(kube, namespace, "kept")  # resumed
    doc["spec"]["server"]["replicas"] = 2
    kube.apply(doc)
    wait_reconciled(kube, namespace, "kept", generation=2)
    wait_for(
        "an Updated event", lambda: any(e["reason"] == "Updated" for e in events(kube, namespace, "kept"))
    )
    assert not [e for e in events(kube, namespace, "kept") if e["reason"] == "Created"]
    wait_for(
        "the copy replaced",
        lambda: copy_key not in (get_cr(kube, namespace, "kept")["metadata"].get("annotations") or {}),
    )


def test_a_label_change_alone_posts_no_updated_event(kube, namespace, run_operator):
    """kopf hands a change of the pipeline's labels to the update handler; the reconcile finds nothing to
    apply and the spec's generation handled already: an Updated event ("applied repository ...") said an
    update happened where none did."""
    op = run_operator()
    doc = cluster_doc("vision", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    wait_for(
        "the Created event", lambda: any(e["reason"] == "Created" for e in events(kube, namespace, "vision"))
    )
    handled = op.text().count("Updating is processed")
    kube.apply({**doc, "metadata": {**doc["metadata"], "labels": {"team": "a"}}})
    wait_for("the label change handled", lambda: op.text().count("Updating is processed") > handled)
    assert not [e for e in events(kube, namespace, "vision") if e["reason"] == "Updated"]
    doc["spec"]["server"]["replicas"] = 2
    kube.apply({**doc, "metadata": {**doc["metadata"], "labels": {"team": "a"}}})
    wait_reconciled(kube, namespace, "vision", 2)
    wait_for(
        "an Updated event", lambda: any(e["reason"] == "Updated" for e in events(kube, namespace, "vision"))
    )


def test_kill_9_mid_reconcile_then_restart_converges(kube, namespace, run_operator):
    op = run_operator()
    names = [f"p{i:02d}" for i in range(20)]
    for name in names:
        kube.apply(cluster_doc(name, namespace))
    time.sleep(0.3)  # some are reconciled, some are not
    op.kill9()
    run_operator()

    def converged() -> bool:
        crs = {c["metadata"]["name"]: c for c in kube.list(API, "TritonPipeline", namespace, "")}
        return all(
            (crs[n].get("status") or {}).get("observedGeneration") == crs[n]["metadata"]["generation"]
            for n in names
        )

    wait_for("all 20 pipelines to converge", converged, timeout=60)
    deployments = kube.list("apps/v1", "Deployment", namespace, "")
    services = kube.list("v1", "Service", namespace, "")
    configmaps = kube.list("v1", "ConfigMap", namespace, SELECTOR)
    assert sorted(d["metadata"]["name"] for d in deployments) == names
    assert sorted(s["metadata"]["name"] for s in services) == names
    # each pipeline's ConfigMaps once: no half-applied set left behind, none made twice
    want = sorted(
        c["metadata"]["name"] for n in names for c in rendered(cluster_doc(n, namespace)).configmaps
    )
    assert sorted(c["metadata"]["name"] for c in configmaps) == want


@pytest.mark.tritonserver
@pytest.mark.parametrize(
    ("source", "router"), [("fanout", "native"), ("fanout", "python"), ("streaming", "auto")]
)
def test_pod_path_configmaps_assembled_and_served(
    kube, namespace, run_operator, tmp_path, source, router, native_router_env
):
    """What a pod does, minus kubelet: the init container's assembly over the ConfigMaps the operator
    wrote (with the operator image's native router library, for the routers the operator chose it for),
    then the real tritonserver on the result."""
    import numpy as np
    import tritonclient.http as httpclient

    from tritonpipeline.local.tritonserver import LocalTriton

    run_operator()
    doc = cluster_doc(source, namespace, source)
    doc["spec"]["server"]["gpus"] = 0  # this machine has no GPU: what a CPU-only pipeline gets
    doc["spec"]["server"]["router"] = router
    kube.apply(doc)
    wait_reconciled(kube, namespace, source)
    graph = kube.get(API, "TritonPipeline", namespace, source)["status"]["graph"]
    assert {r["backend"] for r in graph["routers"]} <= {"native" if router == "native" else "python"}
    cms = children(kube, namespace, source)["configmaps"]
    # a projected volume puts every key of every ConfigMap into one directory
    generated = tmp_path / "generated"
    generated.mkdir()
    for key, blob in entries_of(cms).items():
        (generated / key).write_bytes(blob)
    models = Path(example(source)["spec"]["modelRepository"]["uri"])
    out = tmp_path / "models" / "repository"
    out.parent.mkdir()
    proc = subprocess.run(
        [str(CLI), "assemble", "--generated", str(generated), "--source", str(models), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **native_router_env},
    )
    assert proc.returncode == 0, proc.stderr
    if source == "fanout":  # the router runs on what the operator chose, its library placed from the image
        code = NATIVE_ROUTER_LIBRARY if router == "native" else "model.py"
        assert [p.name for p in (out / "vision__extract__FEATS_A__router" / "1").iterdir()] == [code]
    with LocalTriton(out, log_file=tmp_path / "triton.log", extra_args=["--exit-timeout-secs=5"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            if source == "fanout":
                x = np.array([[1, 2, 3, 4]], dtype=np.float32)
                t = httpclient.InferInput("IMAGE", [1, 4], "FP32")
                t.set_data_from_numpy(x)
                r = client.infer("vision", [t])
                np.testing.assert_allclose(r.as_numpy("SCORE_B"), 3 * (2 * x + 1) - 2)
                np.testing.assert_allclose(r.as_numpy("SCORE_C"), [[float((2 * x + 1).sum())]])
            else:
                total = 0.0
                for k, code in enumerate([4, -2, 10]):
                    t = httpclient.InferInput("CHUNK", [1, 1], "INT32")
                    t.set_data_from_numpy(np.array([[code]], dtype=np.int32))
                    r = client.infer(
                        "streaming", [t], sequence_id=77, sequence_start=k == 0, sequence_end=k == 2
                    )
                    total += code / 2
                    assert float(r.as_numpy("TOTAL")[0, 0]) == pytest.approx(total)
        finally:
            client.close()


def test_assemble_reports_a_missing_model_directory(kube, namespace, run_operator, tmp_path):
    run_operator()
    kube.apply(cluster_doc("vision", namespace))
    wait_reconciled(kube, namespace, "vision")
    generated = tmp_path / "generated"
    generated.mkdir()
    for key, blob in entries_of(children(kube, namespace, "vision")["configmaps"]).items():
        (generated / key).write_bytes(blob)
    source = tmp_path / "source"
    source.mkdir()
    (source / "extractor").mkdir()  # head_b and head_c are missing
    out = tmp_path / "repo"
    proc = subprocess.run(
        [str(CLI), "assemble", "--generated", str(generated), "--source", str(source), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "model directory 'head_b' not found in the source" in proc.stderr
    assert "model directory 'head_c' not found in the source" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_apiserver_outage_is_survived(control_plane, tmp_path):
    """Transient errors: the apiserver goes away and comes back; the running operator carries on."""
    with private_cluster(control_plane.binaries, tmp_path, "outage") as (cp, k):
        op = LocalOperator(cp.kubeconfig, "outage", tmp_path / "operator.log").start()
        with operator_log_on_failure(op):
            doc = cluster_doc("vision", "outage")
            k.apply(doc)
            wait_reconciled(k, "outage", "vision")
            cp.stop()
            time.sleep(3)  # the operator's watches and calls fail meanwhile
            cp.start()
            k = Kube(cp.api_client(), "test-admin")
            doc["spec"]["server"]["replicas"] = 2
            k.apply(doc)
            wait_reconciled(k, "outage", "vision", 2)
            assert k.get("apps/v1", "Deployment", "outage", "vision")["spec"]["replicas"] == 2
            assert op.proc is not None and op.proc.poll() is None, op.text()[-3000:]


@pytest.mark.parametrize("source", ["fanout", "streaming"])
def test_manifests_print_what_the_operator_applies(kube, namespace, run_operator, tmp_path, source):
    """`tritonpipeline manifests` prints the objects the operator applied on the real apiserver, field
    for field (the apiserver's own defaults aside), and no object the operator did not apply."""
    run_operator()
    doc = cluster_doc(source, namespace, source)
    if source == "fanout":
        doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 3, "metric": "queueTime", "target": 50}
    kube.apply(doc)
    wait_reconciled(kube, namespace, source)
    cr = tmp_path / "cr.yaml"
    cr.write_text(yaml.safe_dump(doc))
    result = subprocess.run([str(CLI), "manifests", str(cr)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = list(yaml.safe_load_all(result.stdout))
    again = subprocess.run([str(CLI), "manifests", str(cr)], capture_output=True, text=True, timeout=60)
    assert again.stdout == result.stdout  # deterministic
    assert {o["kind"] for o in printed} >= {"ConfigMap", "Deployment", "Service"}
    for obj in printed:
        meta = obj["metadata"]
        live = kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        assert live is not None, f"{obj['kind']} {meta['name']} printed but not applied"
        assert contained(obj, live) == [], (obj["kind"], meta["name"])
    names = {(o["kind"], o["metadata"]["name"]) for o in printed}
    kids = children(kube, namespace, source)
    applied = [("ConfigMap", c) for c in kids["configmaps"]]
    applied += [(k, kids[key]) for k, key in (("Deployment", "deployment"), ("Service", "service"))]
    applied += [("HorizontalPodAutoscaler", kids["hpa"])] if kids["hpa"] else []
    for kind, obj in applied:
        assert (kind, obj["metadata"]["name"]) in names


@pytest.mark.parametrize(("fixed", "minimum", "expected"), [(3, 2, 3), (1, 2, 2)])
def test_turning_autoscaling_on_keeps_the_replica_count(
    kube, namespace, run_operator, fixed, minimum, expected
):
    """Server-side apply drops a field its manager stops setting: without a handover a fixed pipeline fell
    to 1 pod when autoscaling was turned on. The count stays, and is at least minReplicas."""
    run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["server"]["replicas"] = fixed
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    assert children(kube, namespace, "vision")["deployment"]["spec"]["replicas"] == fixed
    doc["spec"]["autoscaling"] = {
        "minReplicas": minimum,
        "maxReplicas": 5,
        "metric": "queueTime",
        "target": 50,
    }
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    kids = children(kube, namespace, "vision")
    assert kids["hpa"] is not None
    assert kids["deployment"]["spec"]["replicas"] == expected
    # and back to fixed replicas: the operator owns the count again
    del doc["spec"]["autoscaling"]
    doc["spec"]["server"]["replicas"] = 4
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 3)
    assert children(kube, namespace, "vision")["deployment"]["spec"]["replicas"] == 4


def test_a_new_autoscaled_pipeline_starts_at_min_replicas(kube, namespace, run_operator):
    run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["autoscaling"] = {"minReplicas": 3, "maxReplicas": 5, "metric": "queueTime", "target": 50}
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    assert children(kube, namespace, "vision")["deployment"]["spec"]["replicas"] == 3


# --- issue 16: the admin key ------------------------------------------------------------------------------


def _admin_key(kube: Kube, ns: str, name: str) -> tuple[str, dict[str, Any]]:
    import base64

    secret = kube.get("v1", "Secret", ns, name)
    assert secret is not None, f"Secret {name} was not created"
    return base64.b64decode(secret["data"]["admin-key"]).decode(), secret


def test_admin_key_secret_is_created_once_and_used_by_the_pods(kube, namespace, run_operator):
    from tritonpipeline.render.access import NETWORK_POLICY_API

    run_operator()
    doc = cluster_doc("vision", namespace)
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    doc["spec"]["networkPolicy"] = {"metrics": [monitoring]}
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision", 1)
    key, secret = _admin_key(kube, namespace, "vision-admin-key")
    assert len(key) == 64 and int(key, 16) >= 0  # 256 random bits, hex
    assert secret["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]
    container = children(kube, namespace, "vision")["deployment"]["spec"]["template"]["spec"]["containers"][0]
    ref = {"secretKeyRef": {"name": "vision-admin-key", "key": "admin-key"}}
    assert {"name": "TRITON_ADMIN_KEY", "valueFrom": ref} in container["env"]
    assert sum("admin-key=$(TRITON_ADMIN_KEY)" in a for a in container["args"]) == 2
    # the real apiserver accepts the NetworkPolicy (no network plugin runs here to enforce it)
    policy = kube.get(*NETWORK_POLICY_API[:1], NETWORK_POLICY_API[1], namespace, "vision")
    assert policy is not None and [r["from"] for r in policy["spec"]["ingress"]] == [
        [{"podSelector": {}}],
        [monitoring],
    ]
    # one replica: a budget that keeps a drain from evicting it (the operator replaces it first: a surge)
    pdb = kube.get("policy/v1", "PodDisruptionBudget", namespace, "vision")
    assert pdb is not None and pdb["spec"]["minAvailable"] == "50%", pdb
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # later reconciles keep the key: the Secret is created once, never rewritten
    doc["spec"]["server"]["replicas"] = 2
    del doc["spec"]["networkPolicy"]
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    again, later = _admin_key(kube, namespace, "vision-admin-key")
    assert again == key and later["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"]
    assert kube.get(*NETWORK_POLICY_API[:1], NETWORK_POLICY_API[1], namespace, "vision") is None
    # two replicas: a budget of one pod at a time, accepted by the real apiserver; back at one, the first
    pdb = kube.get("policy/v1", "PodDisruptionBudget", namespace, "vision")
    assert pdb is not None and pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"], pdb
    doc["spec"]["server"]["replicas"] = 1
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 3)
    pdb = kube.get("policy/v1", "PodDisruptionBudget", namespace, "vision")
    assert pdb is not None and pdb["spec"].get("minAvailable") == "50%", pdb
    assert "maxUnavailable" not in pdb["spec"]


def test_a_deleted_admin_key_secret_is_made_again_when_a_pod_waits_for_it_and_every_pod_restarts(
    kube, namespace, run_operator
):
    """The operator may create a Secret but never read one, and Secrets are not watched: a deleted admin-key
    Secret came back at the next resync (a minute), while new pods could not start, and the pods that ran
    kept the old key. A pod waiting for it (the kubelet's CreateContainerConfigError) has it made at once,
    and the pods restart so that all of them take the new key."""
    from tritonpipeline.render.access import ADMIN_KEY_CREATED
    from tritonpipeline.render.meta import MANAGED_BY, PIPELINE_LABEL

    op = run_operator({"TRITONPIPELINE_RESYNC_SECONDS": "3600"})  # no resync in this test
    doc = cluster_doc("vision", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    key, _ = _admin_key(kube, namespace, "vision-admin-key")
    template = children(kube, namespace, "vision")["deployment"]["spec"]["template"]
    assert ADMIN_KEY_CREATED not in (
        template["metadata"].get("annotations") or {}
    )  # a new pipeline: no restart
    kube.delete("v1", "Secret", namespace, "vision-admin-key")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": "vision-new"}}
    kube.create(
        {
            **pod,
            "metadata": {**pod["metadata"], "labels": {**MANAGED_BY, PIPELINE_LABEL: "vision"}},
            "spec": {"containers": [{"name": "tritonserver", "image": "triton"}]},
        }
    )
    waiting = {"reason": "CreateContainerConfigError", "message": 'secret "vision-admin-key" not found'}
    status = {"name": "tritonserver", "ready": False, "restartCount": 0, "image": "triton", "imageID": ""}
    write_status(
        kube, pod, {"phase": "Pending", "containerStatuses": [{**status, "state": {"waiting": waiting}}]}
    )
    made = wait_for("the Secret made again", lambda: kube.get("v1", "Secret", namespace, "vision-admin-key"))
    new_key, _ = _admin_key(kube, namespace, "vision-admin-key")
    assert new_key != key and made["metadata"]["ownerReferences"][0]["name"] == "vision"
    restarted = wait_for(
        "the pods restarted",
        lambda: (
            children(kube, namespace, "vision")["deployment"]["spec"]["template"]["metadata"].get(
                "annotations"
            )
            or {}
        ).get(ADMIN_KEY_CREATED),
    )
    assert "holds a new admin key: restarting the pods of Deployment vision" in op.text()
    # the operator's later applies keep it (it is another field manager's), and restart nothing more
    doc["spec"]["server"]["replicas"] = 2
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    annotations = children(kube, namespace, "vision")["deployment"]["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert annotations[ADMIN_KEY_CREATED] == restarted
    assert _admin_key(kube, namespace, "vision-admin-key")[0] == new_key
    assert op.text().count("holds a new admin key") == 1


def test_a_named_admin_key_secret_is_used_and_none_is_generated(kube, namespace, run_operator):
    from tritonpipeline.render.access import ADMIN_KEY_CREATED

    op = run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["server"]["adminKeySecretRef"] = {"name": "platform-keys", "key": "triton"}
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 1)
    container = children(kube, namespace, "vision")["deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "platform-keys", "key": "triton"}
    assert kube.get("v1", "Secret", namespace, "vision-admin-key") is None
    # back to a generated key: the Secret is made, and the changed pod template is the only restart
    del doc["spec"]["server"]["adminKeySecretRef"]
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    assert kube.get("v1", "Secret", namespace, "vision-admin-key") is not None
    template = children(kube, namespace, "vision")["deployment"]["spec"]["template"]
    assert (
        template["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "vision-admin-key"
    )
    assert ADMIN_KEY_CREATED not in (template["metadata"].get("annotations") or {})
    assert "holds a new admin key" not in op.text()


def test_the_admin_key_is_in_no_configmap_event_status_log_or_rendered_object(kube, namespace, run_operator):
    import base64

    from tritonpipeline.render.manifests import render_children
    from tritonpipeline.settings import Settings

    op = run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["networkPolicy"] = {}
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 1)
    doc["spec"]["server"]["args"] = ["--no-such-flag"]  # an invalid spec: a Warning event and a status
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    key, _ = _admin_key(kube, namespace, "vision-admin-key")
    forms = (key, base64.b64encode(key.encode()).decode())
    cr = get_cr(kube, namespace, "vision")
    stored = [
        *kube.list("v1", "ConfigMap", namespace, ""),
        *kube.list("v1", "Event", namespace, ""),
        cr,
        *(kube.get(api, kind, namespace, "vision") for api, kind in
          [("apps/v1", "Deployment"), ("v1", "Service"), ("networking.k8s.io/v1", "NetworkPolicy")]),
    ]  # fmt: skip
    assert any(e["type"] == "Warning" for e in events(kube, namespace, "vision"))
    tp = parse_pipeline({**cluster_doc("vision", namespace), "spec": {**doc["spec"], "server": {}}})
    rendered = render_children(tp, compile_pipeline(tp), Settings())
    texts = {
        "stored objects": json.dumps(stored),
        "rendered objects": json.dumps([*rendered.all(), rendered.scaled_object]),
        "operator log": op.text(),
    }
    assert "created Secret vision-admin-key" in texts["operator log"]
    for where, text in texts.items():
        for form in forms:
            assert form not in text, f"the admin key is in the {where}"


def test_a_stalled_rollout_shows_in_the_pipeline_status(kube, namespace, run_operator):
    """The Deployment's ProgressDeadlineExceeded (what kube-controller-manager writes when a surge pod
    stays Pending, e.g. no free GPU) becomes Progressing=False, RolloutStalled on the pipeline."""
    run_operator()
    kube.apply(cluster_doc("vision", namespace))
    wait_reconciled(kube, namespace, "vision")
    dep = kube.get("apps/v1", "Deployment", namespace, "vision")
    stalled = {
        "type": "Progressing",
        "status": "False",
        "reason": "ProgressDeadlineExceeded",
        "message": 'ReplicaSet "vision-5d8f" has timed out progressing.',
        "lastUpdateTime": "2026-11-22T10:00:00Z",
        "lastTransitionTime": "2026-11-22T10:00:00Z",
    }
    status = {"observedGeneration": dep["metadata"]["generation"], "replicas": 2, "updatedReplicas": 1,
              "readyReplicas": 1, "conditions": [stalled]}  # fmt: skip
    patch_deployment_status(kube, namespace, "vision", status)

    def reported() -> dict[str, Any] | None:
        c = condition(get_cr(kube, namespace, "vision"), "Progressing")
        return c if c and c["reason"] == "RolloutStalled" else None

    c = wait_for("Progressing=False RolloutStalled", reported)
    assert c["status"] == "False" and "timed out progressing" in c["message"]


def test_a_read_write_once_claim_with_several_replicas_is_reported(kube, namespace, run_operator):
    run_operator()
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "models", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    kube.apply(claim)
    doc = cluster_doc("vision", namespace)
    doc["spec"]["server"]["replicas"] = 3
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision")
    c = condition(cr, "ModelSource")
    assert (c["status"], c["reason"]) == ("False", "ReadWriteOnceClaim") and "up to 3 replicas" in c[
        "message"
    ]
    doc["spec"]["server"]["replicas"] = 1
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision", 2)
    assert condition(cr, "ModelSource")["reason"] == "ClaimMountable"
