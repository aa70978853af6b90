"""Calls on the real kube-apiserver that tests make beyond the operator's own (through the public
`Kube.request`): server-side dry runs, reads of any rendered object, the status a call gets, a
ServiceAccount token, a status subresource written as a controller would, CRDs installed and
established."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tritonpipeline.kube.api_client import Kube, KubeError, path
from tritonpipeline.render.crd import crd

from .wait import wait_for

CRD_NAME = "tritonpipelines.serving.tritonpipeline.io"
SERVICEMONITOR_CRD_NAME = "servicemonitors.monitoring.coreos.com"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"

# kinds the operator never writes (the chart's RBAC objects, a ServiceMonitor, a PrometheusRule); the others:
# client.path
_CHART_ONLY_PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ServiceMonitor": "servicemonitors",
    "PrometheusRule": "prometheusrules",
    # written by hand where no controller does (tests/component/test_haproxy_dns.py)
    "EndpointSlice": "endpointslices",
    # a node a test cordons as `kubectl drain` does (tests/component/test_operator_disruption.py)
    "Node": "nodes",
}


def path_for(obj: dict[str, Any], name: bool = True) -> str:
    """REST path of any object the chart or the operator renders."""
    api, kind, meta = obj["apiVersion"], obj["kind"], obj.get("metadata") or {}
    named = meta.get("name") if name else None
    if kind not in _CHART_ONLY_PLURALS:
        return path(api, kind, meta.get("namespace"), named)
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{ns}/{_CHART_ONLY_PLURALS[kind]}" + (f"/{named}" if named else "")


def apply_object(kube: Kube, obj: dict[str, Any], field_manager: str = "e2e") -> dict[str, Any]:
    """Server-side apply (conflicts forced) of any kind in the plural tables."""
    query = [("fieldManager", field_manager), ("force", "true")]
    return kube.request("PATCH", path_for(obj), query=query, body=obj, content_type=APPLY_PATCH)


def dry_run_apply(kube: Kube, obj: dict[str, Any], field_manager: str = "chart-dry-run") -> dict[str, Any]:
    """Server-side apply with dryRun=All and strict field validation: the apiserver runs defaulting,
    schema/CEL validation and admission (RBAC escalation checks included) but stores nothing. No
    retries: an invalid object is refused with 4xx, or 500 for an unconvertible one (KubeError)."""
    query = [
        ("dryRun", "All"),
        ("fieldManager", field_manager),
        ("fieldValidation", "Strict"),
        ("force", "true"),
    ]
    return kube.request("PATCH", path_for(obj), query=query, body=obj, content_type=APPLY_PATCH, retries=0)


def get_object(kube: Kube, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The live copy of `obj` (any kind in the plural table), or None when it does not exist."""
    try:
        return kube.request("GET", path_for(obj))
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


def http_status(kube: Kube, method: str, url: str, body: Any = None) -> int:
    """The HTTP status of one call (no retries): 200 when it succeeded, else the error status (403 when
    refused)."""
    try:
        kube.request(method, url, body=body, retries=0)
    except KubeError as exc:
        return exc.status
    return 200


def service_account_token(kube: Kube, namespace: str, name: str, seconds: int = 3600) -> str:
    """A token for the ServiceAccount from the TokenRequest API (the apiserver signs it with its
    service-account key): the identity a pod of the chart's Deployment gets."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    url = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    return str(kube.request("POST", url, body=body)["status"]["token"])


def write_status(kube: Kube, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch the status subresource of `obj` as its controller would (no controller runs on the
    bare control plane, e.g. a Deployment's readyReplicas)."""
    url = path_for(obj) + "/status"
    return kube.request("PATCH", url, body={"status": status}, content_type=MERGE_PATCH)


def ensure_namespace(kube: Kube, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def wait_established(kube: Kube, name: str, timeout: float = 30.0) -> None:
    def established() -> bool:
        obj = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name) or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    wait_for(f"CRD {name} to be established", established, timeout)


def schemaless_crd(api_version: str, kind: str, plural: str, scope: str = "Namespaced") -> dict[str, Any]:
    """A CRD that serves `kind` at `api_version` (GROUP/VERSION) and keeps any field: another project's
    API, for a test that only needs the cluster to serve it."""
    group, version = api_version.split("/")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


def install_generated_crd(kube: Kube) -> str:
    """Apply the TritonPipeline CRD generated from the spec and wait until it is established."""
    doc = crd()
    kube.apply(doc)
    wait_established(kube, doc["metadata"]["name"])
    return str(doc["metadata"]["name"])


def install_crd_file(kube: Kube, path: Path) -> str:
    """Apply a CRD from a YAML file (server-side, as admin) and wait until it is established."""
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    kube.apply(doc)
    wait_established(kube, doc["metadata"]["name"])
    return str(doc["metadata"]["name"])
