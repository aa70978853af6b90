"""Session-affinity routing (pure): which replica serves each sequence.

Triton carries `sequence_id` in the request body only, so a load balancer in front of several replicas
needs something it can read: the client's IP (`ClientIP`, done by the Service itself) or a header
(`Header`, done by a provider: ingress-nginx, Istio or a Gateway API implementation). The client helper
`tritonpipeline.client` puts the sequence ID into that header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..settings import Settings
from ..spec import TritonPipeline
from .meta import GRPC_PORT, HTTP_PORT, metadata, selector_labels

HASH_BY_ANNOTATION = "nginx.ingress.kubernetes.io/upstream-hash-by"
BACKEND_PROTOCOL_ANNOTATION = "nginx.ingress.kubernetes.io/backend-protocol"
HTTP_PATH = "/v2"  # every KServe v2 HTTP endpoint
GRPC_SERVICE = "inference.GRPCInferenceService"
GRPC_PATH = f"/{GRPC_SERVICE}"  # gRPC requests are HTTP/2 POSTs to /package.Service/Method
HEADLESS_SUFFIX = "-headless"
INGRESS_KINDS = ("http", "grpc")  # one Ingress each: ingress-nginx sets the backend protocol per Ingress
# Kubernetes' upper bound for Service sessionAffinityConfig.clientIP.timeoutSeconds, and its default
CLIENT_IP_MAX_TIMEOUT, CLIENT_IP_DEFAULT_TIMEOUT = 86400, 10800

INGRESS_API = ("networking.k8s.io/v1", "Ingress")
DESTINATION_RULE_API = ("networking.istio.io/v1", "DestinationRule")
# Istio before 1.22 serves DestinationRule as v1beta1 only, with the same spec
OLDER_API_VERSIONS = {DESTINATION_RULE_API: "networking.istio.io/v1beta1"}
HTTP_ROUTE_API = ("gateway.networking.k8s.io/v1", "HTTPRoute")
GRPC_ROUTE_API = ("gateway.networking.k8s.io/v1", "GRPCRoute")
PROVIDER_APIS: dict[str, tuple[tuple[str, str], ...]] = {
    "ingress-nginx": (INGRESS_API,),
    "istio": (DESTINATION_RULE_API,),
    "gateway-api": (HTTP_ROUTE_API, GRPC_ROUTE_API),
}


@dataclass(frozen=True)
class RoutingChildren:
    """What session affinity adds to a pipeline. `provider_objects` need `provider_apis` to be served by
    the cluster (CRDs of Istio or the Gateway API); the rest only needs core Kubernetes."""

    objects: tuple[dict[str, Any], ...] = ()
    provider_objects: tuple[dict[str, Any], ...] = ()
    provider_apis: tuple[tuple[str, str], ...] = ()
    description: str = ""


# --------------------------------------------------------------------------- what the spec implies


def sequence_models(tp: TritonPipeline) -> list[str]:
    """Models that keep state per sequence (sequence batching)."""
    return [m.name for m in tp.spec.models if m.sequence_batching is not None]


def longest_idle_seconds(tp: TritonPipeline) -> int:
    """The longest maxSequenceIdleMicroseconds of any sequence model, rounded up to seconds (0: none)."""
    idle_us = max(
        (m.sequence_batching.max_sequence_idle_microseconds for m in tp.spec.models if m.sequence_batching),
        default=0,
    )
    return -(-idle_us // 1_000_000)


def max_replicas(tp: TritonPipeline) -> int:
    auto = tp.spec.autoscaling
    return auto.max_replicas if auto is not None else tp.spec.server.replicas


def client_ip_timeout(tp: TritonPipeline) -> int:
    """Service ClientIP affinity timeout: at least the longest sequence idle time (a client that pauses
    less than that keeps its replica), never below Kubernetes' default of 3 hours, at most its limit."""
    return min(CLIENT_IP_MAX_TIMEOUT, max(CLIENT_IP_DEFAULT_TIMEOUT, longest_idle_seconds(tp)))


def affinity_problem(tp: TritonPipeline) -> str | None:
    """Why sequences will break across replicas, or None when they cannot."""
    models = sequence_models(tp)
    replicas = max_replicas(tp)
    if not models or replicas <= 1 or tp.spec.routing.session_affinity != "None":
        return None
    how = f"autoscaling up to {replicas} replicas" if tp.spec.autoscaling else f"{replicas} replicas"
    return (
        f"sequence model(s) {', '.join(models)} keep per-sequence state inside one tritonserver, and this "
        f"pipeline runs {how} with routing.sessionAffinity None: chunks of one sequence will reach "
        "different replicas (wrong running state, or 'must specify the START flag' errors). Set "
        "routing.sessionAffinity to Header (with the tritonpipeline.client helper) or ClientIP"
    )


GRPC_INGRESS_WITHOUT_TLS = (
    "no tlsSecretName: the gRPC Ingress {name} gets no TLS, and ingress-nginx serves gRPC (HTTP/2) only over "
    "TLS, so gRPC clients cannot reach the pipeline through it (the HTTP Ingress works); set "
    "spec.routing.tlsSecretName to a TLS Secret for the host in this namespace"
)


def ingress_problem(tp: TritonPipeline) -> str | None:
    """Why the Ingresses will not carry what they are for, or None."""
    routing = tp.spec.routing
    if routing.session_affinity != "Header" or routing.provider != "ingress-nginx":
        return None
    if routing.tls_secret_name is None:
        return GRPC_INGRESS_WITHOUT_TLS.format(name=ingress_name(tp, INGRESS_KINDS[1]))
    return None


def nginx_variable(header: str) -> str:
    """The nginx variable holding a request header: `x-triton-sequence-id` -> `$http_x_triton_sequence_id`."""
    return "$http_" + header.lower().replace("-", "_")


# --------------------------------------------------------------------------- objects


def headless_name(tp: TritonPipeline) -> str:
    return f"{tp.name}{HEADLESS_SUFFIX}"


def ingress_name(tp: TritonPipeline, kind: str) -> str:
    return f"{tp.name}-{kind}"


def headless_service(tp: TritonPipeline, settings: Settings) -> dict[str, Any]:
    """One DNS A record per ready pod, and endpoints that ingress-nginx hashes over directly. No metrics
    port: the ServiceMonitor must scrape each pod once, through the main Service."""
    name = headless_name(tp)  # its length is one of kube/checks.py's name rules
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, tp, settings, component="routing"),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(tp.name),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
            ],
        },
    }


def _ingress(
    tp: TritonPipeline,
    settings: Settings,
    suffix: str,
    path: str,
    port: str,
    annotations: dict[str, str],
) -> dict[str, Any]:
    routing = tp.spec.routing
    rule: dict[str, Any] = {
        "http": {
            "paths": [
                {
                    "path": path,
                    "pathType": "Prefix",
                    "backend": {"service": {"name": headless_name(tp), "port": {"name": port}}},
                }
            ]
        }
    }
    if routing.host:
        rule = {"host": routing.host, **rule}
    spec: dict[str, Any] = {}
    if routing.ingress_class_name:
        spec["ingressClassName"] = routing.ingress_class_name
    if routing.tls_secret_name:
        tls: dict[str, Any] = {"secretName": routing.tls_secret_name}
        if routing.host:
            tls = {"hosts": [routing.host], **tls}
        spec["tls"] = [tls]
    spec["rules"] = [rule]
    return {
        "apiVersion": INGRESS_API[0],
        "kind": INGRESS_API[1],
        "metadata": metadata(ingress_name(tp, suffix), tp, settings, "routing", annotations),
        "spec": spec,
    }


def ingresses(tp: TritonPipeline, settings: Settings) -> list[dict[str, Any]]:
    """ingress-nginx: consistent hashing on the header (`upstream-hash-by`), one Ingress for the HTTP API
    and one for gRPC (ingress-nginx sets the backend protocol per Ingress)."""
    hash_by = {HASH_BY_ANNOTATION: nginx_variable(tp.spec.routing.header)}
    return [
        _ingress(tp, settings, INGRESS_KINDS[0], HTTP_PATH, "http", hash_by),
        _ingress(
            tp,
            settings,
            INGRESS_KINDS[1],
            GRPC_PATH,
            "grpc",
            {**hash_by, BACKEND_PROTOCOL_ANNOTATION: "GRPC"},
        ),
    ]


def destination_rule(tp: TritonPipeline, settings: Settings) -> dict[str, Any]:
    """Istio: consistent hashing on the header for every client of the pipeline's Service. The host is
    the ClusterIP Service (short name, resolved in this namespace): Istio sends traffic for a headless
    Service straight to the pod IP the client resolved, so it would not balance it at all."""
    return {
        "apiVersion": DESTINATION_RULE_API[0],
        "kind": DESTINATION_RULE_API[1],
        "metadata": metadata(tp.name, tp, settings, "routing"),
        "spec": {
            "host": tp.name,
            "trafficPolicy": {
                "loadBalancer": {"consistentHash": {"httpHeaderName": tp.spec.routing.header}},
            },
        },
    }


# Gateway API sessionPersistence (type Header) keeps a session on the backend the gateway picked for its
# first request, keyed by a value the gateway issues in that header; a client-chosen sequence ID is not
# such a value. What it routes by is said wherever the product describes it (status, validate).
GATEWAY_SESSION_CAVEAT = (
    "the gateway pins a session by a value it issues in that header on the first response, which the "
    "client must send back; a client-chosen sequence ID such as the client helper sends does not pin "
    "it: for routing by the client's own key use provider ingress-nginx or istio"
)


def _route_spec(tp: TritonPipeline, rule: dict[str, Any]) -> dict[str, Any]:
    routing = tp.spec.routing
    assert routing.gateway is not None  # the spec requires it with gateway-api
    parent: dict[str, Any] = {"name": routing.gateway.name}
    if routing.gateway.namespace:
        parent["namespace"] = routing.gateway.namespace
    if routing.gateway.section_name:
        parent["sectionName"] = routing.gateway.section_name
    spec: dict[str, Any] = {"parentRefs": [parent]}
    if routing.host:
        spec["hostnames"] = [routing.host]
    persistence = {"sessionName": routing.header, "type": "Header"}
    spec["rules"] = [{**rule, "sessionPersistence": persistence}]
    return spec


def http_route(tp: TritonPipeline, settings: Settings) -> dict[str, Any]:
    rule = {
        "matches": [{"path": {"type": "PathPrefix", "value": HTTP_PATH}}],
        "backendRefs": [{"name": tp.name, "port": HTTP_PORT}],
    }
    return {
        "apiVersion": HTTP_ROUTE_API[0],
        "kind": HTTP_ROUTE_API[1],
        "metadata": metadata(tp.name, tp, settings, "routing"),
        "spec": _route_spec(tp, rule),
    }


def grpc_route(tp: TritonPipeline, settings: Settings) -> dict[str, Any]:
    rule = {
        "matches": [{"method": {"type": "Exact", "service": GRPC_SERVICE}}],
        "backendRefs": [{"name": tp.name, "port": GRPC_PORT}],
    }
    return {
        "apiVersion": GRPC_ROUTE_API[0],
        "kind": GRPC_ROUTE_API[1],
        "metadata": metadata(tp.name, tp, settings, "routing"),
        "spec": _route_spec(tp, rule),
    }


def routing_children(tp: TritonPipeline, settings: Settings) -> RoutingChildren:
    routing = tp.spec.routing
    if routing.session_affinity == "ClientIP":
        return RoutingChildren(
            description=f"Service {tp.name} has sessionAffinity ClientIP, timeout {client_ip_timeout(tp)}s"
        )
    if routing.session_affinity == "Stream":
        return RoutingChildren(
            description=f"each sequence is one gRPC stream (tritonpipeline.client.SequenceStream): Service "
            f"{tp.name} keeps a stream on the pod its connection reached; a leaving pod serves its open "
            f"streams to their end (at most {routing.stream_drain_seconds}s) before Triton stops"
        )
    if routing.session_affinity != "Header":
        return RoutingChildren(description="no session affinity (routing.sessionAffinity None)")
    headless = headless_service(tp, settings)
    provider: list[dict[str, Any]]
    if routing.provider == "ingress-nginx":
        provider = ingresses(tp, settings)
    elif routing.provider == "istio":
        provider = [destination_rule(tp, settings)]
    else:
        provider = [http_route(tp, settings), grpc_route(tp, settings)]
    names = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in [headless, *provider])
    how = f"header {routing.header} routed by {routing.provider}"
    if routing.provider == "gateway-api":
        how = f"{routing.provider} session persistence on header {routing.header} ({GATEWAY_SESSION_CAVEAT})"
    return RoutingChildren(
        objects=(headless,),
        provider_objects=tuple(provider),
        provider_apis=PROVIDER_APIS[routing.provider],
        description=f"{how}: {names}",
    )


def older_api(objects: tuple[dict[str, Any], ...], api: tuple[str, str]) -> tuple[dict[str, Any], ...] | None:
    """The objects of `api` at the older version a provider served before it (OLDER_API_VERSIONS), or
    None when there is none."""
    older = OLDER_API_VERSIONS.get(api)
    if older is None:
        return None
    return tuple({**o, "apiVersion": older} if (o["apiVersion"], o["kind"]) == api else o for o in objects)


def possible_names(tp: TritonPipeline) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every routing object any spec of this pipeline could render."""
    return [
        ("v1", "Service", headless_name(tp)),
        *((*INGRESS_API, ingress_name(tp, kind)) for kind in INGRESS_KINDS),
        (*DESTINATION_RULE_API, tp.name),
        (*HTTP_ROUTE_API, tp.name),
        (*GRPC_ROUTE_API, tp.name),
    ]
