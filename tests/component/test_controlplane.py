"""The e2e control plane is the real thing: upstream kube-apiserver + etcd, RBAC on, x509 and
service-account authentication, server-side apply, CRDs. Nothing here talks to a fake."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from harness.controlplane_binaries import kubernetes_version

pytestmark = pytest.mark.apiserver


def _ns(cp: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(cp.api_client()).create_namespace(client.V1Namespace(metadata={"name": name}))
    return name


def _eventually(check: Callable[[], Any], timeout: float = 15, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except ApiException as err:
            last = err
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout}s (last error: {last})")


def test_version_is_the_pinned_release(control_plane: Any) -> None:
    info = client.VersionApi(control_plane.api_client()).get_code()
    assert info.git_version == kubernetes_version() == control_plane.version
    major, minor, _ = info.git_version.removeprefix("v").split(".")
    assert (info.major, info.minor) == (major, minor)
    status, body = control_plane.get("/readyz?verbose")
    assert status == 200, body
    assert "[+]etcd ok" in body


def test_kubeconfig_is_usable_by_the_python_client(control_plane: Any) -> None:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(metadata={})
    )
    assert review.status.user_info.username == "admin"
    assert "system:masters" in review.status.user_info.groups


def test_rbac_denies_then_allows_an_unprivileged_user(control_plane: Any) -> None:
    ns = _ns(control_plane)
    nobody = client.CoreV1Api(control_plane.api_client(user="nobody"))
    with pytest.raises(ApiException) as denied:
        nobody.list_namespaced_secret(ns)
    assert denied.value.status == 403
    assert 'User "nobody" cannot list resource "secrets"' in json.loads(denied.value.body)["message"]

    rbac = client.RbacAuthorizationV1Api(control_plane.api_client())
    rbac.create_namespaced_role(
        ns,
        client.V1Role(
            metadata={"name": "secret-reader"},
            rules=[client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["get", "list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        ns,
        client.V1RoleBinding(
            metadata={"name": "nobody-reads-secrets"},
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="secret-reader"
            ),
            subjects=[
                client.RbacV1Subject(kind="User", name="nobody", api_group="rbac.authorization.k8s.io")
            ],
        ),
    )
    listed = _eventually(lambda: nobody.list_namespaced_secret(ns), what="RoleBinding takes effect")
    assert listed.items == []
    # the grant is namespaced: other namespaces and writes stay forbidden
    other = _ns(control_plane)
    with pytest.raises(ApiException) as still_denied:
        nobody.list_namespaced_secret(other)
    assert still_denied.value.status == 403
    with pytest.raises(ApiException) as no_write:
        nobody.create_namespaced_secret(ns, client.V1Secret(metadata={"name": "s"}, string_data={"k": "v"}))
    assert no_write.value.status == 403


def test_objects_are_stored(control_plane: Any) -> None:
    api = control_plane.api_client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = _ns(control_plane)
    assert core.read_namespace(ns).status.phase == "Active"

    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata={"name": "settings"}, data={"model": "extractor"})
    )
    assert core.read_namespaced_config_map("settings", ns).data == {"model": "extractor"}

    labels = {"app": "triton"}
    deployment = client.V1Deployment(
        metadata={"name": "triton", "labels": labels},
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata={"labels": labels},
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(name="triton", image="nvcr.io/nvidia/tritonserver:24.08-py3")
                    ]
                ),
            ),
        ),
    )
    apps.create_namespaced_deployment(ns, deployment)
    stored = apps.read_namespaced_deployment("triton", ns)
    assert stored.spec.replicas == 2
    assert stored.spec.template.spec.containers[0].image.endswith("tritonserver:24.08-py3")
    assert stored.metadata.generation == 1
    # defaulting ran in the apiserver (strategy is not in what we sent)
    assert stored.spec.strategy.type == "RollingUpdate"
    # no kube-controller-manager: nothing reconciles the Deployment into ReplicaSets
    assert apps.list_namespaced_replica_set(ns).items == []


def test_server_side_apply_is_idempotent_and_tracks_ownership(control_plane: Any) -> None:
    ns = _ns(control_plane)
    dyn = DynamicClient(control_plane.api_client())
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "applied", "namespace": ns, "labels": {"owner": "tritonpipeline"}},
        "data": {"a": "1"},
    }

    def apply(body: dict[str, Any], manager: str = "tritonpipeline", force: bool | None = True) -> Any:
        return cms.server_side_apply(body=body, field_manager=manager, force_conflicts=force)

    first = apply(manifest)
    second = apply(manifest)
    assert second.metadata.resourceVersion == first.metadata.resourceVersion  # no-op apply
    managers = {(m.manager, m.operation) for m in second.metadata.managedFields}
    assert ("tritonpipeline", "Apply") in managers

    changed = apply({**manifest, "data": {"a": "2"}})
    assert changed.metadata.resourceVersion != first.metadata.resourceVersion
    assert changed.to_dict()["data"] == {"a": "2"}

    # another manager changing a field we own: conflict unless forced
    with pytest.raises(ApiException) as conflict:
        apply({**manifest, "data": {"a": "3"}}, manager="someone-else", force=None)
    assert conflict.value.status == 409
    taken = apply({**manifest, "data": {"a": "3"}}, manager="someone-else", force=True)
    assert taken.to_dict()["data"] == {"a": "3"}


def test_crd_becomes_established_and_serves_objects(control_plane: Any) -> None:
    api = control_plane.api_client()
    ext = client.ApiextensionsV1Api(api)
    group, plural = "e2e.tritonpipeline.io", "widgets"
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {"size": {"type": "integer", "minimum": 1}},
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    ext.create_custom_resource_definition(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": plural, "singular": "widget", "kind": "Widget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": schema},
                        "subresources": {"status": {}},
                    }
                ],
            },
        }
    )

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{plural}.{group}")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    _eventually(established, what="CRD Established")

    ns = _ns(control_plane)
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}}
    _eventually(
        lambda: custom.create_namespaced_custom_object(group, "v1", ns, plural, body), what="CR create"
    )
    assert custom.get_namespaced_custom_object(group, "v1", ns, plural, "w")["spec"] == {"size": 2}
    # the structural schema is enforced by the apiserver
    with pytest.raises(ApiException) as invalid:
        bad = {**body, "metadata": {"name": "bad"}, "spec": {"size": 0}}
        custom.create_namespaced_custom_object(group, "v1", ns, plural, bad)
    assert invalid.value.status == 422
    # status is a subresource: a status write does not bump generation
    obj = custom.patch_namespaced_custom_object_status(
        group, "v1", ns, plural, "w", {"status": {"ready": True}}
    )
    assert obj["status"] == {"ready": True}
    assert obj["metadata"]["generation"] == 1


def test_service_account_tokens_are_signed_and_accepted(control_plane: Any) -> None:
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    ns = _ns(control_plane)
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata={"name": "operator"}))
    token = core.create_namespaced_service_account_token(
        "operator", ns, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    ).status.token

    configuration = client.Configuration()
    configuration.host = control_plane.url
    configuration.ssl_ca_cert = str(control_plane.pki / "ca.crt")
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    review = client.AuthenticationV1Api(client.ApiClient(configuration)).create_self_subject_review(
        client.V1SelfSubjectReview(metadata={})
    )
    assert review.status.user_info.username == f"system:serviceaccount:{ns}:operator"
