"""Names, labels, ports and metadata shared by every rendered child (pure)."""

from __future__ import annotations

import json
from typing import Any

from ..settings import API_VERSION, GROUP, KIND, OPERATOR_NAME, PLURAL, Settings
from ..spec import TritonPipeline
from . import peering

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # the label the API server gives every namespace
PIPELINE_LABEL = f"{GROUP}/pipeline"
MANAGED_BY = {"app.kubernetes.io/managed-by": OPERATOR_NAME}


# the resource name of each kind the operator reads or writes
PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "Ingress": "ingresses",
    "DestinationRule": "destinationrules",
    "HTTPRoute": "httproutes",
    "GRPCRoute": "grpcroutes",
    "Gateway": "gateways",
    "GatewayClass": "gatewayclasses",
    "BackendTrafficPolicy": "backendtrafficpolicies",
    "UpstreamSettingsPolicy": "upstreamsettingspolicies",
    "ScaledObject": "scaledobjects",
    "Secret": "secrets",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "NetworkPolicy": "networkpolicies",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Event": "events",
    "Namespace": "namespaces",
    "Pod": "pods",
    KIND: PLURAL,
    "CustomResourceDefinition": "customresourcedefinitions",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "SubjectAccessReview": "subjectaccessreviews",
    "SelfSubjectReview": "selfsubjectreviews",
    **peering.PLURALS,
}


def plural(kind: str) -> str:
    """The resource name of a kind the operator reads or writes (`Ingress` -> `ingresses`)."""
    return PLURALS[kind]


# hex digits of the generated repository's digest in its ConfigMaps' names
CONFIGMAP_DIGEST_CHARS = 10


def configmap_name(tp: TritonPipeline | str, index: int, digest: str) -> str:
    """The ConfigMap holding part `index` of the generated repository whose parts' digest is `digest`
    (render/packing.py `parts_digest`), of the pipeline (or of the pipeline of this name): content-addressed,
    so a changed repository is a new set of ConfigMaps, and a pod always mounts the one its template was
    rendered for."""
    name = tp if isinstance(tp, str) else tp.name
    return f"{name}-repo-{digest[:CONFIGMAP_DIGEST_CHARS]}-{index}"


def selector_labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "triton-pipeline", "app.kubernetes.io/instance": name}


def labels(name: str, settings: Settings, component: str = "tritonserver") -> dict[str, str]:
    return {
        **selector_labels(name),
        "app.kubernetes.io/component": component,
        **MANAGED_BY,
        PIPELINE_LABEL: name,
    }


def owner_reference(body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(
    name: str,
    tp: TritonPipeline,
    settings: Settings,
    component: str = "tritonserver",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(tp.name, settings, component)}
    if annotations:
        meta["annotations"] = dict(annotations)
    if tp.metadata.namespace:
        meta["namespace"] = tp.metadata.namespace
    return meta


def namespace_of(tp: TritonPipeline) -> str:
    return tp.metadata.namespace or "default"


def plain_copy(data: Any) -> Any:
    """A deep copy of plain data (what JSON holds): dicts, lists, strings, numbers."""
    return json.loads(json.dumps(data))
