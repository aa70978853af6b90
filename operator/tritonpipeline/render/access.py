"""Who may use a pipeline's Triton: the admin-key Secret and the optional NetworkPolicy (pure).

The key itself never passes through these renderers' output except in `admin_secret`, which the
operator creates once (POST, never apply) and nothing prints: the Deployment reads it from the Secret
into an env var that the kubelet expands in tritonserver's args.
"""

from __future__ import annotations

import re
from typing import Any

from ..settings import GROUP, Settings
from ..spec import TritonPipeline
from ..triton import security
from .conditions import pod_problem
from .meta import GRPC_PORT, HTTP_PORT, METRICS_PORT, NAMESPACE_NAME, namespace_of, selector_labels
from .meta import metadata as _meta

NETWORK_POLICY_API = ("networking.k8s.io/v1", "NetworkPolicy")
# on the pod template, under a field manager of its own: when the operator made the current admin key, set
# only when it makes one for a pipeline whose pods already run, so that every pod takes the same key
ADMIN_KEY_CREATED = f"{GROUP}/admin-key-created"
ADMIN_KEY_MANAGER_SUFFIX = "-admin-key"


def admin_secret_name(tp: TritonPipeline) -> str:
    return generated_secret_name(tp.name)


def generated_secret_name(pipeline: str) -> str:
    """The admin-key Secret the operator generates for the pipeline named `pipeline`."""
    return f"{pipeline}-admin-key"


def admin_key_ref(tp: TritonPipeline) -> tuple[str, str]:
    """(Secret name, data key) holding this pipeline's admin key: the user's, or the generated one."""
    ref = tp.spec.server.admin_key_secret_ref
    if ref is not None:
        return ref.name, ref.key
    return admin_secret_name(tp), security.SECRET_KEY


def generates_secret(tp: TritonPipeline) -> bool:
    return tp.spec.server.admin_key_secret_ref is None


def admin_args() -> list[str]:
    """tritonserver flags restricting the admin APIs to the key in the container's env var."""
    return security.restricted_args(f"$({security.KEY_ENV})")


def admin_env(tp: TritonPipeline) -> list[dict[str, Any]]:
    name, key = admin_key_ref(tp)
    return [{"name": security.KEY_ENV, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}]


def admin_secret(tp: TritonPipeline, key: str, settings: Settings) -> dict[str, Any]:
    """The generated Secret holding `key` (owned by the pipeline, so deleted with it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(admin_secret_name(tp), tp, settings),
        "type": "Opaque",
        "stringData": {security.SECRET_KEY: key},
    }


def _rule(peers: list[dict[str, Any]], ports: tuple[int, ...]) -> list[dict[str, Any]]:
    """One ingress rule for `ports` from `peers`; none when there are none."""
    if not peers:
        return []
    sources = [dict(p) for p in peers]
    return [{"from": sources, "ports": [{"protocol": "TCP", "port": p} for p in ports]}]


def operator_peer(settings: Settings) -> dict[str, Any] | None:
    """The operator's pods as a NetworkPolicy peer (its status poll reads metrics on 8002), or None when
    the operator does not know its namespace and labels (the chart sets them)."""
    if not settings.operator_namespace or not settings.operator_labels:
        return None
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: settings.operator_namespace}},
        "podSelector": {"matchLabels": dict(settings.operator_labels)},
    }


def namespace_peers(namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    """The pods of the pipeline's own namespace and of each of `namespaces`, as NetworkPolicy peers."""
    others = [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: ns}}} for ns in namespaces]
    return [{"podSelector": {}}, *others]


def network_policy(tp: TritonPipeline, settings: Settings) -> dict[str, Any] | None:
    """spec.networkPolicy as a NetworkPolicy on the pipeline's pods (ingress only); without it, the
    default one where the admin turned it on (settings.default_network_policy), else None. A field left
    out admits the pods of the pipeline's namespace and of the admin's routing namespaces (inference) or
    metrics namespaces (metrics). The operator's pods may always read metrics, unless `metrics` is `[]`
    (nobody)."""
    policy = tp.spec.network_policy
    if policy is None and not settings.default_network_policy:
        return None
    inference = policy.inference if policy is not None else None
    metrics = policy.metrics if policy is not None else None
    if inference is None:
        inference = namespace_peers(settings.routing_namespaces)
    if metrics is None:
        metrics = namespace_peers(settings.metrics_namespaces)
    peer = operator_peer(settings)
    if peer is not None and metrics != []:
        metrics = [*metrics, peer]
    return {
        "apiVersion": NETWORK_POLICY_API[0],
        "kind": NETWORK_POLICY_API[1],
        "metadata": _meta(tp.name, tp, settings),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(tp.name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                *_rule(inference, (HTTP_PORT, GRPC_PORT)),
                *_rule(metrics, (METRICS_PORT,)),
            ],
        },
    }


def admin_key_roll(tp: TritonPipeline, created: str) -> dict[str, Any]:
    """The apply that restarts a pipeline's pods after the operator made a new admin key (`created`,
    when): its pod template's ADMIN_KEY_CREATED annotation, and nothing else of the Deployment."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": tp.name, "namespace": namespace_of(tp)},
        "spec": {"template": {"metadata": {"annotations": {ADMIN_KEY_CREATED: created}}}},
    }


def waits_for_secret(pods: list[dict[str, Any]], secret: str) -> bool:
    """Whether a pod cannot start its containers because Secret `secret` is missing: status.pod_problem's
    CreateContainerConfigError, `secret "NAME" not found` from the kubelet's watch of the Secret,
    `secrets "NAME" not found` from the API server where it gets the Secret each time."""
    missing = re.compile(rf'\bsecrets? "{re.escape(secret)}" not found')
    problems = (pod_problem([pod]) for pod in pods)
    return any(
        p is not None and p[0] == "CreateContainerConfigError" and missing.search(p[1]) for p in problems
    )


def reads_secret(deployment: dict[str, Any], secret: str) -> bool:
    """Whether a Deployment's pods read their admin key from Secret `secret`."""
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or []
    return any(
        ((env.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") == secret
        for c in containers
        for env in c.get("env") or []
        if env.get("name") == security.KEY_ENV
    )
