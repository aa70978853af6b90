"""The securityContexts of a pipeline's pods (pure): Pod Security "restricted" defaults, and the spec's
own settings merged over them. Read by the renderer (manifests.py) and by the checks of what the
cluster admin allows (checks.py)."""

from __future__ import annotations

from typing import Any

from ..spec import TritonPipeline
from .meta import plain_copy

# Restricted-compliant defaults (Pod Security "restricted"); spec.server.podSecurityContext and
# securityContext replace them. 1000 is the uid of the triton-server user in NVIDIA's image, as in
# NVIDIA's and KServe's manifests; the init container runs with the same ids, so Triton reads its files.
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "fsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# the ids a platform assigns itself when they are left out: OpenShift's restricted-v2 SCC sets runAsUser and
# fsGroup from the namespace's openshift.io/sa.scc.* ranges and refuses any other value (1000 included);
# the operator leaves them out where the cluster serves this API (settings.adapt_security_context)
PLATFORM_ASSIGNED_IDS = ("runAsUser", "runAsGroup", "fsGroup")
OPENSHIFT_SCC_API = ("security.openshift.io/v1", "SecurityContextConstraints")
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
# the init container (our own code) writes only into the models volume: its root filesystem is read-only
# (Triton's is not: backends write caches under HOME and /tmp; docs/concepts/security.md)
INIT_SECURITY_CONTEXT: dict[str, Any] = {"readOnlyRootFilesystem": True}


def merged(defaults: dict[str, Any], mine: dict[str, Any] | None) -> dict[str, Any]:
    """`mine` over `defaults` field by field: a mapping on both sides is merged the same way, anything
    else (a value, a list) of `mine` replaces the default."""
    out = plain_copy(defaults)
    for key, value in (mine or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = plain_copy(value)
    return out


def container_security(tp: TritonPipeline) -> dict[str, Any]:
    """The containers' securityContext: the spec's merged over the restricted defaults."""
    return merged(CONTAINER_SECURITY_CONTEXT, tp.spec.server.security_context)


def init_security(tp: TritonPipeline) -> dict[str, Any]:
    """The init container's securityContext: the spec's merged over the defaults and a read-only root."""
    return merged({**CONTAINER_SECURITY_CONTEXT, **INIT_SECURITY_CONTEXT}, tp.spec.server.security_context)


def pod_security(tp: TritonPipeline, platform_ids: bool = False) -> dict[str, Any]:
    """The pod's securityContext: the spec's merged over the restricted defaults, which leave the user
    and group ids to the platform with `platform_ids` (the spec's own ids are kept)."""
    defaults = POD_SECURITY_CONTEXT
    if platform_ids:
        defaults = {k: v for k, v in defaults.items() if k not in PLATFORM_ASSIGNED_IDS}
    return merged(defaults, tp.spec.server.pod_security_context)
