"""spec.routing: session affinity across pods, and who routes on the header."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    Field,
)

from .base import DNS_LABEL_RE, DNS_SUBDOMAIN_RE, HEADER_RE, HOST_RE, Rule, _Base, _name_rule

# The Gateway API implementations whose header-hashing policy the operator renders
# (render/routing_objects.py), and `standard`: the Gateway API's own sessionPersistence
GatewayImplementation = Literal["envoy-gateway", "istio", "nginx-gateway-fabric", "standard"]
# NGINX Gateway Fabric takes the hash key as an nginx variable matching ^\$[a-z_]+$: no digits
NGINX_GATEWAY_HEADER_RE = re.compile(r"^[A-Za-z-]+$")


class GatewayRef(_Base):
    """The Gateway that the HTTPRoute and GRPCRoute attach to (provider gateway-api)."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(description="Gateway name.")
    namespace: Annotated[str, _name_rule(DNS_LABEL_RE, "namespace")] | None = Field(
        default=None, description="Gateway namespace; absent: the pipeline's."
    )
    section_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None, description="One listener of the Gateway."
    )
    implementation: GatewayImplementation | None = Field(
        default=None,
        description="Whose consistent-hash policy on the header goes with the routes: `envoy-gateway` "
        "(BackendTrafficPolicy), `istio` (DestinationRule), `nginx-gateway-fabric` (UpstreamSettingsPolicy) "
        "or `standard` (the routes' own `sessionPersistence`, which pins a value the gateway issues, not "
        "the client's key); absent: read from the controllerName of the Gateway's GatewayClass, for a "
        "Gateway of the pipeline's namespace or of one the admin shares (chart value "
        "security.sharedGatewayNamespaces).",
    )


class Routing(_Base):
    session_affinity: Literal["None", "ClientIP", "Header", "Stream"] = Field(
        default="None",
        description="`None`, `ClientIP` (Service affinity), `Header` (a proxy hashes a header) or "
        "`Stream` (recommended for sequences: each sequence is one gRPC stream of `tritonpipeline.client`, "
        "which stays on the pod it reached; a leaving pod serves its open streams to their end before "
        "Triton stops).",
    )
    stream_drain_seconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=600,
        description="With `Stream`: the longest a leaving pod (scale-down, rollout) waits for its open "
        "sequence streams to end before Triton stops.",
    )
    header: Annotated[str, _name_rule(HEADER_RE, "header")] = Field(
        default="x-triton-sequence-id", description="Header to hash on, with `Header`."
    )
    provider: Literal["ingress-nginx", "istio", "gateway-api"] = Field(
        default="gateway-api",
        description="Who routes on the header: `gateway-api` (HTTPRoute + GRPCRoute attached to "
        "`gateway`, with the consistent-hash policy of the Gateway's implementation), `istio` (a "
        "DestinationRule with `consistentHash.httpHeaderName`) or `ingress-nginx` (deprecated: retired "
        "upstream; two Ingresses with `upstream-hash-by`).",
    )
    host: Annotated[str, _name_rule(HOST_RE, "host")] | None = Field(
        default=None, description="Host name for the Ingress rules / route `hostnames`; absent: any host."
    )
    ingress_class_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None, description="`ingressClassName` of the Ingresses (ingress-nginx)."
    )
    tls_secret_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None,
        description="TLS Secret of the Ingresses (ingress-nginx serves gRPC over HTTP/2 only with TLS).",
    )
    gateway: GatewayRef | None = Field(
        default=None,
        description="The Gateway the routes attach to (`parentRefs`); required with provider `gateway-api`.",
    )

    RULES = (
        Rule(
            lambda r: r.session_affinity != "Header" or len(r.header) > 0,
            "self.sessionAffinity != 'Header' || size(self.header) > 0",
            "sessionAffinity Header needs a header name",
            ".header",
        ),
        Rule(
            lambda r: r.session_affinity != "Header" or r.provider != "gateway-api" or r.gateway is not None,
            "self.sessionAffinity != 'Header' || self.provider != 'gateway-api' || has(self.gateway)",
            "provider gateway-api (the default) needs routing.gateway, the Gateway the HTTPRoute and "
            "GRPCRoute attach to; or set routing.provider to istio",
            ".gateway",
        ),
        Rule(
            lambda r: (
                r.gateway is None
                or r.gateway.implementation != "nginx-gateway-fabric"
                or NGINX_GATEWAY_HEADER_RE.fullmatch(r.header) is not None
            ),
            "!has(self.gateway) || !has(self.gateway.implementation) || "
            "self.gateway.implementation != 'nginx-gateway-fabric' || self.header.matches('"
            + NGINX_GATEWAY_HEADER_RE.pattern
            + "')",
            "NGINX Gateway Fabric hashes on an nginx variable of letters and underscores: a header for "
            "implementation nginx-gateway-fabric has letters and '-' only",
            ".header",
        ),
    )
