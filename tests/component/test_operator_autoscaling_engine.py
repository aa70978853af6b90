"""Autoscaling engine `auto` (the default) on real kube-apiservers, the operator as `tritonpipeline run`:
the HPA on prometheus-adapter's metrics where the cluster does not serve KEDA's ScaledObject, a
ScaledObject where it does (KEDA's real CRD, from its Go module: e2e/build-gotool.sh keda-crd), the
status saying which and why, and the switch when the CRD appears later: read from API discovery by the
discovery loop (not the resync: it is set to an hour here), the pipeline's own HPA deleted first, an HPA
someone else owns left as it is. Issue 55, point 5.

Each test has a control plane of its own: the shared one must stay without KEDA's CRD."""

from __future__ import annotations

from typing import Any

import pytest

from component import test_operator_routing
from component.test_operator import get_cr, operator_log_on_failure, wait_reconciled
from component.test_operator_routing import KEDA, crd_documents, get, install
from component.test_tenants import TENANT, grant, grant_tenant, refusal, review_operator, with_spec
from component.test_webhook import API, OPERATOR_GROUPS, call, collection, restricted_operator
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import cluster_doc, condition
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.render import autoscaling_objects
from tritonpipeline.render.reach import RECORD_ANNOTATION

pytestmark = pytest.mark.apiserver


# the same fresh control planes as test_operator_routing's (the shared one must stay without KEDA's CRD)
plane_factory = test_operator_routing.plane_factory


KIND = "TritonPipeline"
SCALED = ("keda.sh/v1alpha1", "ScaledObject")
HPA = ("autoscaling/v2", "HorizontalPodAutoscaler")
# the discovery loop every second, the resync only once an hour: a switch seen here is discovery's
FAST = {
    "TRITONPIPELINE_DISCOVERY_SECONDS": "1",
    "TRITONPIPELINE_RESYNC_SECONDS": "3600",
    "TRITONPIPELINE_STATUS_POLL_SECONDS": "1",
}


def scaled(name: str, ns: str, **autoscaling: Any) -> dict[str, Any]:
    doc = cluster_doc(name, ns)
    doc["spec"]["autoscaling"] = {"maxReplicas": 3, **autoscaling}
    return doc


def scaling_of(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return condition(get_cr(kube, ns, name), "AutoscalingConfigured") or {}


def reason_is(kube: Kube, ns: str, name: str, reason: str) -> Any:
    def check() -> dict[str, Any] | None:
        found = scaling_of(kube, ns, name)
        return found if found.get("reason") == reason else None

    return check


def engine_in_status(kube: Kube, ns: str, name: str) -> str | None:
    return ((get_cr(kube, ns, name).get("status") or {}).get("autoscaler") or {}).get("engine")


def foreign_hpa(ns: str, name: str) -> dict[str, Any]:
    """An HPA of the pipeline's name that someone else made (no owner reference)."""
    return {
        "apiVersion": HPA[0],
        "kind": HPA[1],
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 2,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ],
        },
    }  # fmt: skip


def test_auto_makes_the_hpa_without_keda_then_switches_when_its_crd_appears(plane_factory):
    """No KEDA: `auto` makes the HPA and says why (the ScaledObject's API is not served). KEDA's CRD
    installed: within seconds (the discovery loop; nothing changed in the pipelines) `auto` has a
    ScaledObject, its HPA is deleted, status says KEDA and why; `hpa` named in the spec keeps its HPA; an
    HPA of a pipeline's name that the pipeline does not own stays. The CRD removed: back to the HPA."""
    plane = plane_factory()
    kube, ns = plane.kube, plane.namespace()
    kube.apply(foreign_hpa(ns, "taken"))
    foreign_uid = kube.get(*HPA, ns, "taken")["metadata"]["uid"]
    op = plane.operator(ns, FAST)
    with operator_log_on_failure(op):
        for doc in (scaled("auto", ns), scaled("fixed", ns, engine="hpa"), scaled("taken", ns)):
            kube.apply(doc)
            wait_reconciled(kube, ns, doc["metadata"]["name"])
        # without KEDA: the HPA, and why
        hpa = kube.get(*HPA, ns, "auto")
        assert hpa is not None and hpa["metadata"]["ownerReferences"][0]["name"] == "auto"
        assert get(kube, *SCALED, ns, "auto") is None
        without = scaling_of(kube, ns, "auto")
        assert (without["status"], without["reason"]) == ("True", "HorizontalPodAutoscaler"), without
        assert without["message"].startswith(autoscaling_objects.AUTO_HPA_NO_KEDA), without
        assert "triton_queue_time_us" in without["message"]  # the metric the HPA reads
        fixed = scaling_of(kube, ns, "fixed")
        assert fixed["message"].startswith("autoscaling.engine hpa (set in the spec)"), fixed
        wait_for("status.autoscaler.engine hpa", lambda: engine_in_status(kube, ns, "auto") == "hpa", 20)
        assert condition(get_cr(kube, ns, "taken"), "ObjectsOwned")["status"] == "False"  # not its HPA

        install(kube, crd_documents(*KEDA))  # KEDA arrives; no pipeline changes
        so = wait_for("the ScaledObject of auto", lambda: get(kube, *SCALED, ns, "auto"), 30)
        assert so["metadata"]["ownerReferences"][0]["name"] == "auto"
        wait_for("auto's own HPA deleted", lambda: kube.get(*HPA, ns, "auto") is None, 30)
        switched = wait_for("status says KEDA", reason_is(kube, ns, "auto", "ScaledObject"), 30)
        assert switched["status"] == "True" and switched["message"].startswith(autoscaling_objects.AUTO_KEDA)
        assert so["spec"]["triggers"][0]["metadata"]["query"] in switched["message"]
        wait_for("status.autoscaler.engine keda", lambda: engine_in_status(kube, ns, "auto") == "keda", 20)
        assert get_cr(kube, ns, "auto")["metadata"]["generation"] == 1  # no change of the pipeline
        assert "the cluster now serves" in op.text() and "keda.sh/v1alpha1" in op.text()
        # `hpa` in the spec: still the HPA, no ScaledObject
        assert kube.get(*HPA, ns, "fixed") is not None and get(kube, *SCALED, ns, "fixed") is None
        # someone else's HPA of a pipeline's name is never deleted by the switch
        wait_for("taken's ScaledObject", lambda: get(kube, *SCALED, ns, "taken"), 30)
        still = kube.get(*HPA, ns, "taken")
        assert still is not None and still["metadata"]["uid"] == foreign_uid
        assert not still["metadata"].get("ownerReferences")

        # KEDA removed: back to the HPA (deleting the CRD deletes the ScaledObjects with it)
        kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "scaledobjects.keda.sh")
        wait_for("auto's HPA again", lambda: kube.get(*HPA, ns, "auto"), 60)
        back = wait_for("back to the HPA", reason_is(kube, ns, "auto", "HorizontalPodAutoscaler"), 30)
        assert back["message"].startswith(autoscaling_objects.AUTO_HPA_NO_KEDA), back
        assert op.alive()


def test_with_keda_installed_auto_makes_a_scaled_object_unless_the_operator_may_not_use_it(plane_factory):
    """KEDA's CRD served from the start: `auto` makes the ScaledObject (KEDA makes the HPA itself) and
    no HPA. With TRITONPIPELINE_USE_KEDA off (the chart without the ScaledObject grant), `auto` makes the
    HPA and says why, and `keda` named in the spec gets no autoscaler and a False condition."""
    plane = plane_factory(KEDA)
    kube, ns = plane.kube, plane.namespace()
    op = plane.operator(ns, FAST)
    with operator_log_on_failure(op):
        kube.apply(scaled("auto", ns, metric="pendingRequests"))
        wait_reconciled(kube, ns, "auto")
        so = kube.get(*SCALED, ns, "auto")
        assert so is not None and so["spec"]["triggers"][0]["metricType"] == "AverageValue"
        assert kube.get(*HPA, ns, "auto") is None
        chosen = scaling_of(kube, ns, "auto")
        assert (chosen["status"], chosen["reason"]) == ("True", "ScaledObject")
        assert chosen["message"].startswith(autoscaling_objects.AUTO_KEDA), chosen
        wait_for("status.autoscaler.engine keda", lambda: engine_in_status(kube, ns, "auto") == "keda", 20)

    ns = plane.namespace()
    op = plane.operator(ns, {**FAST, "TRITONPIPELINE_USE_KEDA": "false"})
    with operator_log_on_failure(op):
        kube.apply(scaled("auto", ns))
        kube.apply(scaled("asked", ns, engine="keda"))
        wait_reconciled(kube, ns, "auto")
        wait_reconciled(kube, ns, "asked")
        assert kube.get(*HPA, ns, "auto") is not None and kube.get(*SCALED, ns, "auto") is None
        assert scaling_of(kube, ns, "auto")["message"].startswith(autoscaling_objects.AUTO_HPA_KEDA_OFF)
        refused = scaling_of(kube, ns, "asked")
        assert (refused["status"], refused["reason"]) == ("False", "KedaNotEnabled"), refused
        assert kube.get(*SCALED, ns, "asked") is None and kube.get(*HPA, ns, "asked") is None


def operator_without_scaled_objects(plane: Any, ns: str, env: dict[str, str]) -> LocalOperator:
    """The operator as ServiceAccount `operator` of `ns`, whose ClusterRole grants every group it uses
    but keda.sh: it may not create ScaledObjects (a bare operator installed without KEDA's grant)."""
    rules = [{"apiGroups": OPERATOR_GROUPS, "resources": ["*"], "verbs": ["*"]}]
    path = plane.workdir / f"kubeconfig-{ns}"
    config, _ = restricted_operator(plane.cp, plane.kube, ns, f"tp-no-keda-{ns}", rules, path)
    return LocalOperator(config, ns, plane.workdir / f"operator-{ns}.log", env=env).start()


def test_auto_falls_back_to_the_hpa_where_the_operators_rbac_denies_scaled_objects(plane_factory):
    """KEDA served and TRITONPIPELINE_USE_KEDA on (the bare operator's default), but the operator's RBAC
    has no ScaledObjects: `auto` makes the HPA (before, it chose KEDA, the API server refused the
    ScaledObject, and the pipeline had no autoscaler at all) and AutoscalingConfigured names the missing
    permission. Granted the ScaledObjects, the next resync switches it to KEDA."""
    plane = plane_factory(KEDA)
    kube, ns = plane.kube, plane.namespace()
    op = operator_without_scaled_objects(plane, ns, {**FAST, "TRITONPIPELINE_RESYNC_SECONDS": "2"})
    with operator_log_on_failure(op):
        kube.apply(scaled("auto", ns))
        wait_reconciled(kube, ns, "auto")
        hpa = kube.get(*HPA, ns, "auto")
        assert hpa is not None and hpa["metadata"]["ownerReferences"][0]["name"] == "auto"
        assert get(kube, *SCALED, ns, "auto") is None
        why = scaling_of(kube, ns, "auto")
        assert (why["status"], why["reason"]) == ("True", "HorizontalPodAutoscaler"), why
        assert "RBAC does not let it create or patch scaledobjects.keda.sh" in why["message"], why
        wait_for("status.autoscaler.engine hpa", lambda: engine_in_status(kube, ns, "auto") == "hpa", 20)

        keda_rules = [{"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["*"]}]
        grant(kube, ns, "system:serviceaccount:" + ns + ":operator", keda_rules)
        so = wait_for("the ScaledObject once granted", lambda: get(kube, *SCALED, ns, "auto"), 30)
        assert so["metadata"]["ownerReferences"][0]["name"] == "auto"
        wait_for("auto's own HPA deleted", lambda: kube.get(*HPA, ns, "auto") is None, 30)
        switched = wait_for("status says KEDA", reason_is(kube, ns, "auto", "ScaledObject"), 30)
        assert switched["message"].startswith(autoscaling_objects.AUTO_KEDA), switched
        assert op.alive()


KEDA_LEAD = "keda-lead"  # who may also create ScaledObjects in the namespace


def test_a_tenant_who_may_not_create_scaled_objects_gets_the_hpa_and_its_address_is_not_used(
    plane_factory, tmp_path
):
    """Issue 54's rule kept with `auto` as the default (the access review on, KEDA served, ScaledObject not
    a trusted kind, as the chart installs it): a tenant whose RBAC denies scaledobjects is not refused
    for `auto` (the HPA serves it), but gets no ScaledObject, so no KEDA trigger at the address it wrote
    (status says why); an author who may create ScaledObjects gets one, at the address they chose; and
    `keda` named in the spec by the tenant is still refused at admission, with the field."""
    plane = plane_factory(KEDA)
    kube, ns = plane.kube, plane.namespace()
    grant_tenant(kube, ns)
    keda_rules = [
        {"apiGroups": ["serving.tritonpipeline.io"], "resources": ["tritonpipelines"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list"]},
        {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["create"]},
    ]
    grant(kube, ns, KEDA_LEAD, keda_rules)
    url = collection(ns)
    anywhere = {"maxReplicas": 3, "prometheusAddress": "http://127.0.0.1:10250"}
    with review_operator(plane.cp, kube, ns, tmp_path):
        status, answer, _ = call(
            kube, "POST", url, with_spec("plain", ns, autoscaling=anywhere), as_user=TENANT
        )
        assert status == 201, answer  # `auto`: not refused, the HPA serves it
        record = (kube.get(API, KIND, ns, "plain") or {})["metadata"]["annotations"][RECORD_ANNOTATION]
        assert "scaledobjects" not in record and TENANT in record
        wait_reconciled(kube, ns, "plain")
        assert kube.get(*HPA, ns, "plain") is not None
        assert kube.get(*SCALED, ns, "plain") is None
        why = scaling_of(kube, ns, "plain")
        assert why["reason"] == "HorizontalPodAutoscaler", why
        assert why["message"].startswith(autoscaling_objects.AUTO_HPA_NOT_REVIEWED.split("(")[0]), why
        assert "spec.autoscaling" in why["message"] and "scaledobjects.keda.sh" in why["message"], why

        chosen = {"maxReplicas": 3, "prometheusAddress": "http://prometheus.team.example:9090"}
        status, answer, _ = call(
            kube, "POST", url, with_spec("mine", ns, autoscaling=chosen), as_user=KEDA_LEAD
        )
        assert status == 201, answer
        wait_reconciled(kube, ns, "mine")
        so = wait_for("mine's ScaledObject", lambda: kube.get(*SCALED, ns, "mine"), 30)
        assert so["spec"]["triggers"][0]["metadata"]["serverAddress"] == chosen["prometheusAddress"]
        assert kube.get(*HPA, ns, "mine") is None
        assert scaling_of(kube, ns, "mine")["message"].startswith(autoscaling_objects.AUTO_KEDA)

        asked = {**anywhere, "engine": "keda"}
        status, answer, _ = call(kube, "POST", url, with_spec("asked", ns, autoscaling=asked), as_user=TENANT)
        assert status == 403 and "spec.autoscaling.prometheusAddress" in refusal(answer), answer
        assert kube.get(API, KIND, ns, "asked") is None
