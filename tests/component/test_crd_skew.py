"""Version skew between the CRD and the operator on a real kube-apiserver: a running operator keeps serving
while a newer CRD is applied, and after a rollback. The rule and its pure tests:
tests/unit/test_crd_skew.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from component.test_crd_upgrade import CRD_PATH
from component.test_crd_upgrade import _kubectl_server_side_apply as kubectl_server_side_apply
from component.test_webhook import DENIED, call, collection, create, start_webhook_operator
from harness.kubeapi import CRD_NAME, ensure_namespace, wait_established
from harness.operator_process import OperatorProcess
from harness.wait import wait_for
from helpers import condition
from support.crd_skew import FUTURE_FLAG, FUTURE_OBJECT, FUTURE_SETTING, with_future_fields
from support.webhook import cluster_doc, cyclic
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.render import conditions as st
from tritonpipeline.render.crd import crd
from tritonpipeline.render.meta import PIPELINE_LABEL
from tritonpipeline.runtime import log_events as events

API = "serving.tritonpipeline.io/v1alpha1"


NAMESPACE = "ml"


# the children whose survival says nothing was rolled or pruned
CHILD_KINDS = (("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ConfigMap"))


# ------------------------------------------------------------------------------ real apiserver


def newer_crd() -> dict[str, Any]:
    """This tree's CRD as a future release would change it under the evolution policy."""
    new = crd()
    spec = new["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["server"]["properties"]["someFutureSetting"] = {"type": "string", "default": "x"}
    spec["properties"]["models"]["items"]["properties"]["futureFlag"] = {"type": "boolean", "default": False}
    spec["properties"]["futureObject"] = {"type": "object", "properties": {"mode": {"type": "string"}}}
    return new


def webhook_operator(cp: Any, kube: Kube, log: Path) -> OperatorProcess:
    """This tree's operator serving its webhook with failurePolicy Ignore (the chart's default), resyncing
    every 2 s."""
    resync = {"TRITONPIPELINE_RESYNC_SECONDS": "2"}
    return start_webhook_operator(cp.kubeconfig, kube, NAMESPACE, log, "tp-webhook-skew", "Ignore", resync)


def children(kube: Kube, name: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> uid of the pipeline's Deployment, Services and ConfigMaps."""
    return {
        (kind, obj["metadata"]["name"]): obj["metadata"]["uid"]
        for api, kind in CHILD_KINDS
        for obj in kube.list(api, kind, NAMESPACE, f"{PIPELINE_LABEL}={name}")
    }


def pipeline(kube: Kube, name: str) -> dict[str, Any]:
    obj = kube.get(API, "TritonPipeline", NAMESPACE, name)
    assert obj is not None, name
    return obj


def reported(kube: Kube, name: str) -> dict[str, Any] | None:
    """The pipeline once it says SchemaCurrent=False naming the newer CRD's fields."""
    obj = pipeline(kube, name)
    schema = condition(obj, st.SCHEMA_CURRENT) or {}
    return obj if schema.get("reason") == st.FIELDS_FROM_NEWER_SCHEMA else None


def snapshot(kube: Kube, name: str) -> dict[str, Any]:
    """What must not change: SpecValid (its lastTransitionTime: it never flipped), the children (the same
    objects) and the Deployment's pod template."""
    deployment = kube.get("apps/v1", "Deployment", NAMESPACE, name)
    assert deployment is not None, name
    return {
        "valid": condition(pipeline(kube, name), "SpecValid"),
        "children": children(kube, name),
        "template": deployment["spec"]["template"],
    }


def reconciled(kube: Kube, name: str) -> dict[str, Any] | None:
    """The pipeline once this operator reconciled its current generation."""
    obj = pipeline(kube, name)
    status = obj.get("status") or {}
    handled = status.get("observedGeneration") == obj["metadata"]["generation"]
    return obj if handled and condition(obj, st.SCHEMA_CURRENT) else None


def invalid(kube: Kube, name: str) -> dict[str, Any] | None:
    obj = pipeline(kube, name)
    return obj if (condition(obj, "SpecValid") or {}).get("status") == "False" else None


def assert_served_as_before(kube: Kube, name: str, before: dict[str, Any]) -> None:
    """Still valid, the newer fields named, nothing rolled or pruned."""
    obj = wait_for(
        f"{name} reports the newer CRD's fields (or is marked invalid)",
        lambda: reported(kube, name) or invalid(kube, name),
        60,
    )
    valid = condition(obj, "SpecValid") or {}
    assert valid.get("status") == "True", valid
    assert obj["spec"]["server"]["someFutureSetting"] == "x"  # the newer CRD's default, as served
    message = (condition(obj, st.SCHEMA_CURRENT) or {})["message"]
    assert message.startswith(f"{FUTURE_SETTING}, {FUTURE_FLAG}: "), message
    after = snapshot(kube, name)
    assert after["valid"]["status"] == "True", after["valid"]
    assert after == before, name


def writes_pass_with_the_warning(kube: Kube, created: str, updated: str) -> None:
    """A create (with the new optional object) and a spec update: allowed, with the webhook's warning
    naming the newer CRD's fields (the warning shows the webhook answered: Ignore would let a failed
    call through silently). A real problem is still refused."""
    doc = with_future_fields(cluster_doc("diamond", created))
    status, body, warnings = create(kube, NAMESPACE, doc)
    assert status == 201, body
    assert any(w.startswith(f"{FUTURE_SETTING}, {FUTURE_FLAG}, {FUTURE_OBJECT}: ") for w in warnings), (
        warnings
    )
    obj = pipeline(kube, updated)
    obj["spec"]["server"]["replicas"] = obj["spec"]["server"].get("replicas", 1) + 1
    status, body, warnings = call(kube, "PUT", f"{collection(NAMESPACE)}/{updated}", obj)
    assert status == 200, body
    assert any(w.startswith(f"{FUTURE_SETTING}, {FUTURE_FLAG}: ") for w in warnings), warnings
    status, body, _ = create(kube, NAMESPACE, with_future_fields(cyclic()), dry_run=True)
    assert status == 422 and DENIED in body["message"], body


STORED = ("a", "b")  # the pipelines stored before the newer CRD (diamond)


@contextmanager
def helm_installed(binaries: Any, workdir: Path) -> Iterator[tuple[Any, Kube]]:
    """A private kube-apiserver + etcd with this tree's CRD created as `helm install` creates it, namespace
    NAMESPACE, and the pipelines STORED in it as `kubectl apply` stores them; stopped afterwards."""
    from harness.controlplane import ControlPlane

    with ControlPlane(workdir / "cp", binaries) as cp:
        kube = Kube(cp.api_client(), "test-admin")
        kube.request("POST", CRD_PATH, query=[("fieldManager", "helm")], body=crd())  # helm install
        wait_established(kube, CRD_NAME)
        ensure_namespace(kube, NAMESPACE)
        for name in STORED:
            kube.apply(cluster_doc("diamond", name, NAMESPACE), field_manager="kubectl")
        yield cp, kube


# the log line of a stored pipeline under the newer CRD (no futureObject: only the defaults fill it in)
IGNORED_LINE = events.NEWER_FIELDS_IGNORED.format(fields=f"{FUTURE_SETTING}, {FUTURE_FLAG}")


@pytest.mark.apiserver
def test_a_running_operator_keeps_serving_while_a_newer_crd_is_applied_and_after_a_rollback(
    control_plane: Any, tmp_path: Path
) -> None:
    """docs/how-to/upgrade.md's first step (the new CRD applied while the previous release's operator and
    its webhook still run), with this tree's operator as the previous release and this tree's CRD plus a
    future release's fields as the new one. Then `helm rollback` with the newer CRD kept: the older
    operator starts again against it (the same code path, from a fresh start)."""
    with helm_installed(control_plane.binaries, tmp_path) as (cp, kube):
        stored = STORED
        op = webhook_operator(cp, kube, tmp_path / "operator.log")
        try:
            for name in stored:
                wait_for(f"{name} reconciled", lambda n=name: reconciled(kube, n), 60)
            before = {name: snapshot(kube, name) for name in stored}
            assert all(b["valid"]["status"] == "True" for b in before.values()), before

            kubectl_server_side_apply(kube, newer_crd(), force=True)  # the upgrade how-to's first step
            wait_established(kube, CRD_NAME)
            for name in stored:
                assert_served_as_before(kube, name, before[name])
            writes_pass_with_the_warning(kube, "c", "a")
            wait_for("c reported", lambda: reported(kube, "c"), 60)
            wait_for("a's new generation reconciled", lambda: reconciled(kube, "a"), 60)
            before["a"] = snapshot(kube, "a")
            assert before["a"]["valid"]["status"] == "True", before["a"]
            assert IGNORED_LINE in op.text(), op.text()[-3000:]
            assert "Traceback" not in op.text(), op.text()[-3000:]
            op.stop()

            # `helm rollback` keeps the newer CRD: the older operator, started afresh, reads it the same way
            op = webhook_operator(cp, kube, tmp_path / "operator-rolled-back.log")
            wait_for("the restarted operator's log line", lambda: IGNORED_LINE in op.text(), 60)
            for name in stored:
                assert_served_as_before(kube, name, before[name])
            writes_pass_with_the_warning(kube, "d", "b")
            assert "Traceback" not in op.text(), op.text()[-3000:]
        except BaseException:
            print(f"\n===== operator log =====\n{op.text()[-6000:]}")
            raise
        finally:
            op.stop()
