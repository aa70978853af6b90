"""Session-affinity routing (pure): which replica serves each sequence.

Triton carries `sequence_id` in the request body only, so a load balancer in front of several replicas
needs something it can read: the client's IP (`ClientIP`, done by the Service itself) or a header
(`Header`, done by a provider: a Gateway API implementation, Istio or ingress-nginx). The client helper
`tritonpipeline.client` puts the sequence ID into that header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..settings import Settings
from ..spec import NGINX_GATEWAY_HEADER_RE, GatewayImplementation, TritonPipeline
from .conditions import Condition
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
GATEWAY_API = ("gateway.networking.k8s.io/v1", "Gateway")
GATEWAY_CLASS_API = ("gateway.networking.k8s.io/v1", "GatewayClass")
BACKEND_TRAFFIC_POLICY_API = ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy")
UPSTREAM_SETTINGS_POLICY_API = ("gateway.nginx.org/v1alpha1", "UpstreamSettingsPolicy")
PROVIDER_APIS: dict[str, tuple[tuple[str, str], ...]] = {
    "ingress-nginx": (INGRESS_API,),
    "istio": (DESTINATION_RULE_API,),
    "gateway-api": (HTTP_ROUTE_API, GRPC_ROUTE_API),
}
# A Gateway's implementation, from its GatewayClass's spec.controllerName (each project's documented name)
GATEWAY_CONTROLLERS: dict[str, GatewayImplementation] = {
    "gateway.envoyproxy.io/gatewayclass-controller": "envoy-gateway",
    "istio.io/gateway-controller": "istio",
    "gateway.nginx.org/nginx-gateway-controller": "nginx-gateway-fabric",
}
# What each implementation hashes the header with, next to the routes
GATEWAY_POLICY_APIS: dict[GatewayImplementation, tuple[str, str] | None] = {
    "envoy-gateway": BACKEND_TRAFFIC_POLICY_API,
    "istio": DESTINATION_RULE_API,
    "nginx-gateway-fabric": UPSTREAM_SETTINGS_POLICY_API,
    "standard": None,  # the routes' own sessionPersistence
}


@dataclass(frozen=True)
class RoutingChildren:
    """What session affinity adds to a pipeline. `provider_objects` need `provider_apis` to be served by
    the cluster (CRDs of Istio or the Gateway API); the rest only needs core Kubernetes."""

    objects: tuple[dict[str, Any], ...] = ()
    provider_objects: tuple[dict[str, Any], ...] = ()
    provider_apis: tuple[tuple[str, str], ...] = ()
    description: str = ""
    gateway_pending: bool = False  # gateway-api: the implementation is not known (yet); no route rendered
    affinity: Condition | None = None  # SessionAffinity (affinity_condition)


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
        "routing.sessionAffinity to Stream (recommended: each sequence one gRPC stream of "
        "tritonpipeline.client.SequenceStream), Header (with the tritonpipeline.client helper) or ClientIP"
    )


def affinity_condition(tp: TritonPipeline) -> Condition:
    """SessionAffinity: whether the sequences of the pipeline's sequence models stay on one replica."""
    problem = affinity_problem(tp)
    if problem:
        return Condition("SessionAffinity", False, "SequencesWillBreak", problem)
    models = sequence_models(tp)
    if models and max_replicas(tp) > 1:
        how = tp.spec.routing.session_affinity
        message = f"sequences of {', '.join(models)} stay on one replica (routing.sessionAffinity {how})"
        return Condition("SessionAffinity", True, "SequencesRouted", message)
    message = "no sequence model" if not models else "at most one replica serves the sequences"
    return Condition("SessionAffinity", True, "NotNeeded", message)


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


def headless_name(tp: TritonPipeline | str) -> str:
    """The headless Service of the pipeline (or of the pipeline of this name)."""
    return f"{_name(tp)}{HEADLESS_SUFFIX}"


def ingress_name(tp: TritonPipeline | str, kind: str) -> str:
    return f"{_name(tp)}-{kind}"


def _name(tp: TritonPipeline | str) -> str:
    return tp if isinstance(tp, str) else tp.name


def routing_metadata(tp: TritonPipeline, settings: Settings) -> dict[str, Any]:
    """The metadata of the pipeline's routing objects, named as the pipeline: made once a rendering,
    each object takes it (the headless Service and the Ingresses under their own names)."""
    return metadata(tp.name, tp, settings, component="routing")


def headless_service(tp: TritonPipeline, meta: dict[str, Any]) -> dict[str, Any]:
    """One DNS A record per ready pod, and endpoints that ingress-nginx hashes over directly. No metrics
    port: the ServiceMonitor must scrape each pod once, through the main Service. `meta`:
    routing_metadata."""
    name = headless_name(tp)  # its length is one of render/checks.py's name rules
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**meta, "name": name},
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
    meta: dict[str, Any],
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
        "metadata": {**meta, "name": ingress_name(tp, suffix), "annotations": dict(annotations)},
        "spec": spec,
    }


def ingresses(tp: TritonPipeline, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """ingress-nginx: consistent hashing on the header (`upstream-hash-by`), one Ingress for the HTTP API
    and one for gRPC (ingress-nginx sets the backend protocol per Ingress). `meta`: routing_metadata."""
    hash_by = {HASH_BY_ANNOTATION: nginx_variable(tp.spec.routing.header)}
    return [
        _ingress(tp, meta, INGRESS_KINDS[0], HTTP_PATH, "http", hash_by),
        _ingress(
            tp,
            meta,
            INGRESS_KINDS[1],
            GRPC_PATH,
            "grpc",
            {**hash_by, BACKEND_PROTOCOL_ANNOTATION: "GRPC"},
        ),
    ]


def destination_rule(tp: TritonPipeline, meta: dict[str, Any]) -> dict[str, Any]:
    """Istio: consistent hashing on the header for every client of the pipeline's Service. The host is
    the ClusterIP Service (short name, resolved in this namespace): Istio sends traffic for a headless
    Service straight to the pod IP the client resolved, so it would not balance it at all."""
    return {
        "apiVersion": DESTINATION_RULE_API[0],
        "kind": DESTINATION_RULE_API[1],
        "metadata": dict(meta),
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
    "it: leave routing.gateway.implementation unset (or name envoy-gateway, istio or "
    "nginx-gateway-fabric) to hash the client's own key"
)
PROVIDER_NOT_INSTALLED = (
    "routing.provider {provider} needs {missing}, which this cluster does not serve: install {provider} (its "
    "CRDs) and the routing objects are created at the next reconcile; everything else, the headless "
    "Service {headless} included, is applied"
)
INGRESS_NGINX_RETIRED = (
    "provider ingress-nginx is deprecated: Kubernetes retired ingress-nginx (no releases or security fixes "
    "since March 2026); move to provider gateway-api (docs/how-to/migrate-ingress-nginx.md)"
)
GATEWAY_PENDING = (
    "HTTPRoute and GRPCRoute {name} with the consistent-hash policy of the implementation named by the "
    "controllerName of Gateway {gateway}'s GatewayClass (read by the operator; "
    "routing.gateway.implementation names it instead)"
)
GATEWAY_NOT_FOUND = (
    "{what} does not exist, so the operator cannot tell which implementation hashes the header: no route "
    "is created until it does (the next reconcile or resync looks again); create it, or set "
    "routing.gateway.implementation"
)
# a Gateway of another namespace than the pipeline's, one the admin has not listed as shared: the
# operator does not read it for the pipeline, so the status cannot tell a tenant whether it exists and
# who serves it (issue 54)
GATEWAY_NOT_LOOKED_UP = (
    "Gateway {gateway} is in another namespace, one whose Gateways the operator does not read for a "
    "pipeline (chart value security.sharedGatewayNamespaces lists those it reads), so it cannot tell which "
    "implementation hashes the header: no route is created; set routing.gateway.implementation"
)
GATEWAY_NOT_READABLE = (
    "the operator may not read {what}, so it cannot tell which implementation hashes the header: no route "
    "is created; grant get on it (the chart does) or set routing.gateway.implementation"
)
UNKNOWN_GATEWAY_IMPLEMENTATION = (
    "Gateway {gateway} is served by controller {controller} (GatewayClass {gateway_class}), for which the "
    "operator knows no consistent-hash policy (it knows {known}): no route is created, so no request "
    "reaches the pipeline through that Gateway without affinity; set routing.gateway.implementation to "
    "one of envoy-gateway, istio, nginx-gateway-fabric, or standard (the Gateway API's sessionPersistence, "
    "if that controller supports it)"
)
NGINX_GATEWAY_HEADER = (
    "Gateway {gateway} is NGINX Gateway Fabric, which hashes on an nginx variable of letters and "
    "underscores: header {header} has other characters; no route is created; choose a header of letters "
    "and '-' (routing.header, and the client helper's header=)"
)


def gateway_ref(tp: TritonPipeline) -> tuple[str, str]:
    """(namespace, name) of the Gateway the routes attach to."""
    gateway = tp.spec.routing.gateway
    assert gateway is not None  # the spec requires it with gateway-api
    return gateway.namespace or tp.metadata.namespace or "default", gateway.name


def needs_gateway_lookup(tp: TritonPipeline) -> bool:
    """Whether the implementation is read from the cluster (Gateway -> GatewayClass -> controllerName)."""
    routing = tp.spec.routing
    return (
        routing.session_affinity == "Header"
        and routing.provider == "gateway-api"
        and routing.gateway is not None
        and routing.gateway.implementation is None
    )


def implementation_of(controller_name: str) -> GatewayImplementation | None:
    return GATEWAY_CONTROLLERS.get(controller_name)


def unknown_implementation(gateway: str, gateway_class: str, controller: str) -> str:
    known = ", ".join(f"{impl} ({name})" for name, impl in GATEWAY_CONTROLLERS.items())
    return UNKNOWN_GATEWAY_IMPLEMENTATION.format(
        gateway=gateway, gateway_class=gateway_class, controller=controller, known=known
    )


def gateway_problem(tp: TritonPipeline, implementation: GatewayImplementation) -> str | None:
    """Why `implementation` cannot hash this spec's header, or None."""
    header = tp.spec.routing.header
    if implementation == "nginx-gateway-fabric" and not NGINX_GATEWAY_HEADER_RE.fullmatch(header):
        namespace, name = gateway_ref(tp)
        return NGINX_GATEWAY_HEADER.format(gateway=f"{namespace}/{name}", header=header)
    return None


def _route_spec(tp: TritonPipeline, rule: dict[str, Any], persistence: bool) -> dict[str, Any]:
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
    if persistence:
        rule = {**rule, "sessionPersistence": {"sessionName": routing.header, "type": "Header"}}
    spec["rules"] = [rule]
    return spec


def http_route(tp: TritonPipeline, meta: dict[str, Any], persistence: bool = False) -> dict[str, Any]:
    rule = {
        "matches": [{"path": {"type": "PathPrefix", "value": HTTP_PATH}}],
        "backendRefs": [{"name": tp.name, "port": HTTP_PORT}],
    }
    return {
        "apiVersion": HTTP_ROUTE_API[0],
        "kind": HTTP_ROUTE_API[1],
        "metadata": dict(meta),
        "spec": _route_spec(tp, rule, persistence),
    }


def grpc_route(tp: TritonPipeline, meta: dict[str, Any], persistence: bool = False) -> dict[str, Any]:
    rule = {
        "matches": [{"method": {"type": "Exact", "service": GRPC_SERVICE}}],
        "backendRefs": [{"name": tp.name, "port": GRPC_PORT}],
    }
    return {
        "apiVersion": GRPC_ROUTE_API[0],
        "kind": GRPC_ROUTE_API[1],
        "metadata": dict(meta),
        "spec": _route_spec(tp, rule, persistence),
    }


def backend_traffic_policy(tp: TritonPipeline, meta: dict[str, Any]) -> dict[str, Any]:
    """Envoy Gateway: consistent hashing (Envoy's ring hash) on the header for both routes' backends."""
    group = HTTP_ROUTE_API[0].split("/")[0]
    return {
        "apiVersion": BACKEND_TRAFFIC_POLICY_API[0],
        "kind": BACKEND_TRAFFIC_POLICY_API[1],
        "metadata": dict(meta),
        "spec": {
            "targetRefs": [
                {"group": group, "kind": HTTP_ROUTE_API[1], "name": tp.name},
                {"group": group, "kind": GRPC_ROUTE_API[1], "name": tp.name},
            ],
            "loadBalancer": {
                "type": "ConsistentHash",
                "consistentHash": {"type": "Headers", "headers": [{"name": tp.spec.routing.header}]},
            },
        },
    }


def upstream_settings_policy(tp: TritonPipeline, meta: dict[str, Any]) -> dict[str, Any]:
    """NGINX Gateway Fabric: nginx's `hash $http_<header> consistent` on the upstream of the routes'
    backend Service (the policy attaches to the Service)."""
    return {
        "apiVersion": UPSTREAM_SETTINGS_POLICY_API[0],
        "kind": UPSTREAM_SETTINGS_POLICY_API[1],
        "metadata": dict(meta),
        "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": tp.name}],
            "loadBalancingMethod": "hash consistent",
            "hashMethodKey": nginx_variable(tp.spec.routing.header),
        },
    }


def gateway_objects(
    tp: TritonPipeline, meta: dict[str, Any], implementation: GatewayImplementation
) -> list[dict[str, Any]]:
    """The routes, and the policy that makes `implementation` hash the header."""
    standard = implementation == "standard"
    routes = [http_route(tp, meta, standard), grpc_route(tp, meta, standard)]
    if implementation == "envoy-gateway":
        return [*routes, backend_traffic_policy(tp, meta)]
    if implementation == "istio":  # Istio's gateway applies the DestinationRule of the backend Service
        return [*routes, destination_rule(tp, meta)]
    if implementation == "nginx-gateway-fabric":
        return [*routes, upstream_settings_policy(tp, meta)]
    return routes


def routing_children(
    tp: TritonPipeline, settings: Settings, implementation: GatewayImplementation | None = None
) -> RoutingChildren:
    """What session affinity adds. With provider gateway-api, `implementation` is the one the operator
    read from the cluster (routing.gateway.implementation wins); with neither, no route is rendered
    (`gateway_pending`): a route without the policy would carry sequences without affinity."""
    routing, affinity = tp.spec.routing, affinity_condition(tp)
    if routing.session_affinity == "ClientIP":
        return RoutingChildren(
            description=f"Service {tp.name} has sessionAffinity ClientIP, timeout {client_ip_timeout(tp)}s",
            affinity=affinity,
        )
    if routing.session_affinity == "Stream":
        return RoutingChildren(
            description=f"each sequence is one gRPC stream (tritonpipeline.client.SequenceStream): Service "
            f"{tp.name} keeps a stream on the pod its connection reached; a leaving pod serves its open "
            f"streams to their end (at most {routing.stream_drain_seconds}s) before Triton stops",
            affinity=affinity,
        )
    if routing.session_affinity != "Header":
        return RoutingChildren(
            description="no session affinity (routing.sessionAffinity None)", affinity=affinity
        )
    meta = routing_metadata(tp, settings)
    headless = headless_service(tp, meta)
    provider: list[dict[str, Any]]
    how = f"header {routing.header} routed by {routing.provider}"
    apis = PROVIDER_APIS[routing.provider]
    if routing.provider == "ingress-nginx":
        provider = ingresses(tp, meta)
    elif routing.provider == "istio":
        provider = [destination_rule(tp, meta)]
    else:
        assert routing.gateway is not None  # the spec requires it with gateway-api
        chosen = routing.gateway.implementation or implementation
        if chosen is None or gateway_problem(tp, chosen):
            namespace, name = gateway_ref(tp)
            pending = GATEWAY_PENDING.format(name=tp.name, gateway=f"{namespace}/{name}")
            return RoutingChildren((headless,), gateway_pending=True, description=pending, affinity=affinity)
        provider = gateway_objects(tp, meta, chosen)
        policy = GATEWAY_POLICY_APIS[chosen]
        apis = (*apis, policy) if policy else apis
        how = f"header {routing.header} hashed by {chosen} on gateway-api routes"
        if chosen == "standard":
            how = f"gateway-api session persistence on header {routing.header} ({GATEWAY_SESSION_CAVEAT})"
    names = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in [headless, *provider])
    return RoutingChildren(
        objects=(headless,),
        provider_objects=tuple(provider),
        provider_apis=apis,
        description=f"{how}: {names}",
        affinity=affinity,
    )


def older_api(objects: tuple[dict[str, Any], ...], api: tuple[str, str]) -> tuple[dict[str, Any], ...] | None:
    """The objects of `api` at the older version a provider served before it (OLDER_API_VERSIONS), or
    None when there is none."""
    older = OLDER_API_VERSIONS.get(api)
    if older is None:
        return None
    return tuple({**o, "apiVersion": older} if (o["apiVersion"], o["kind"]) == api else o for o in objects)


def possible_names(pipeline: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every routing object any spec of the pipeline named `pipeline` could
    render."""
    return [
        ("v1", "Service", headless_name(pipeline)),
        *((*INGRESS_API, ingress_name(pipeline, kind)) for kind in INGRESS_KINDS),
        (*DESTINATION_RULE_API, pipeline),
        (*HTTP_ROUTE_API, pipeline),
        (*GRPC_ROUTE_API, pipeline),
        (*BACKEND_TRAFFIC_POLICY_API, pipeline),
        (*UPSTREAM_SETTINGS_POLICY_API, pipeline),
    ]
