"""Which Gateway API implementation serves a pipeline's Gateway: read from the cluster (Gateway ->
GatewayClass -> controllerName), so that its consistent-hash policy goes with the routes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..kube.api_client import Kube, KubeError, is_transient
from ..render import routing_objects as rt
from ..settings import Settings
from ..spec import GatewayImplementation, TritonPipeline


@dataclass(frozen=True)
class GatewayLookup:
    """The implementation, or why there is none: a RoutingConfigured reason and message."""

    implementation: GatewayImplementation | None = None
    reason: str = ""
    message: str = ""


async def _get(kube: Kube, api: tuple[str, str], namespace: str | None, name: str) -> dict[str, Any] | None:
    return await asyncio.to_thread(kube.get, api[0], api[1], namespace, name)


async def lookup(kube: Kube, tp: TritonPipeline, settings: Settings) -> GatewayLookup:
    """Read the implementation of the pipeline's Gateway. A transient failure raises (the reconcile is
    retried); a refusal, a missing object or an unknown controller is a lookup without implementation.
    A Gateway of another namespace is read only where the admin lists that namespace as shared: what
    the lookup finds goes into the pipeline's status, which its author reads."""
    namespace, name = rt.gateway_ref(tp)
    gateway = f"{namespace}/{name}"
    own = tp.metadata.namespace or "default"
    if namespace != own and namespace not in settings.shared_gateway_namespaces:
        return GatewayLookup(None, "GatewayNotLookedUp", rt.GATEWAY_NOT_LOOKED_UP.format(gateway=gateway))
    try:
        live = await _get(kube, rt.GATEWAY_API, namespace, name)
        if live is None:
            if not await asyncio.to_thread(kube.resource_exists, *rt.GATEWAY_API):
                missing = f"{rt.GATEWAY_API[1]} ({rt.GATEWAY_API[0]})"
                headless = rt.headless_name(tp)
                message = rt.PROVIDER_NOT_INSTALLED.format(
                    provider="gateway-api", missing=missing, headless=headless
                )
                return GatewayLookup(None, "ProviderNotInstalled", message)
            message = rt.GATEWAY_NOT_FOUND.format(what=f"Gateway {gateway}")
            return GatewayLookup(None, "GatewayNotFound", message)
        class_name = str((live.get("spec") or {}).get("gatewayClassName", ""))
        what = f"GatewayClass {class_name} (of Gateway {gateway})"
        gateway_class = await _get(kube, rt.GATEWAY_CLASS_API, None, class_name)
    except KubeError as exc:
        if is_transient(exc) or exc.status != 403:
            raise
        what = f"Gateway {gateway} or its GatewayClass"
        return GatewayLookup(None, "GatewayNotReadable", rt.GATEWAY_NOT_READABLE.format(what=what))
    if gateway_class is None:
        return GatewayLookup(None, "GatewayNotFound", rt.GATEWAY_NOT_FOUND.format(what=what))
    controller = str((gateway_class.get("spec") or {}).get("controllerName", ""))
    implementation = rt.implementation_of(controller)
    if implementation is None:
        message = rt.unknown_implementation(gateway, class_name, controller)
        return GatewayLookup(None, "UnknownGatewayImplementation", message)
    problem = rt.gateway_problem(tp, implementation)
    if problem:
        return GatewayLookup(None, "UnsupportedHeader", problem)
    return GatewayLookup(implementation)
