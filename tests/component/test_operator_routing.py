"""Session-affinity routing and autoscaling objects on the real kube-apiserver: the operator (a subprocess)
creates them, reports a missing provider API as a condition without crashing, warns about sequences that
will break; and every generated object passes the apiserver's strict validation with the real
third-party CRDs (KEDA, Istio, Gateway API; taken from their Go modules by e2e/build-gotool.sh).

Clusters with provider CRDs are fresh control planes of their own: the shared one must stay without
them for the ProviderNotInstalled tests."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from component.test_operator import (
    API,
    children,
    events,
    get_cr,
    operator_log_on_failure,
    private_cluster,
    wait_reconciled,
)
from harness.gotools import ToolError, ToolUnavailable, ensure_tool
from harness.kubeapi import dry_run_apply, schemaless_crd, wait_established
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import cluster_doc, condition
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.render import autoscaling_objects
from tritonpipeline.render.crd import crd
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

pytestmark = pytest.mark.apiserver

GATEWAY = {"name": "public", "namespace": "gateways"}
# the operator as a subprocess (the shared control plane and a fresh namespace per test: conftest)


def routed(
    name: str,
    ns: str,
    provider: str,
    source: str = "streaming",
    implementation: str | None = None,
    gateway: dict[str, str] = GATEWAY,
) -> dict[str, Any]:
    doc = cluster_doc(name, ns, source)
    doc["spec"]["routing"] = {"sessionAffinity": "Header", "provider": provider}
    if provider == "gateway-api":
        doc["spec"]["routing"]["gateway"] = {
            **gateway,
            **({"implementation": implementation} if implementation else {}),
        }
    return doc


def get(kube: Kube, api: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(api, kind, ns, name)
    except KubeError as exc:  # the kind itself is not served (its CRD is absent)
        if exc.status == 404:
            return None
        raise


def condition_is(kube: Kube, ns: str, name: str, ctype: str, status: str, reason: str) -> Any:
    def check() -> dict[str, Any] | None:
        c = condition(get_cr(kube, ns, name), ctype)
        return c if c and c["status"] == status and c["reason"] == reason else None

    return check


# ------------------------------------------------------------------------------ shared plane: no CRDs


def test_header_ingress_nginx_creates_headless_service_and_ingresses_then_prunes_them(
    kube, namespace, run_operator
):
    run_operator()
    doc = routed("stream", namespace, "ingress-nginx")
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "stream")
    headless = kube.get("v1", "Service", namespace, "stream-headless")
    assert headless is not None and headless["spec"]["clusterIP"] == "None"
    assert headless["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]
    http = kube.get("networking.k8s.io/v1", "Ingress", namespace, "stream-http")
    grpc = kube.get("networking.k8s.io/v1", "Ingress", namespace, "stream-grpc")
    for ing in (http, grpc):
        assert ing["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"] == (
            "$http_x_triton_sequence_id"
        )
    assert grpc["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    routing = condition(cr, "RoutingConfigured")
    # configured, and deprecated: ingress-nginx is retired upstream
    assert (routing["status"], routing["reason"]) == ("True", "ProviderDeprecated")
    assert "Ingress stream-http" in routing["message"] and "Service stream-headless" in routing["message"]
    assert "docs/how-to/migrate-ingress-nginx.md" in routing["message"]
    assert condition(cr, "SessionAffinity")["reason"] == "SequencesRouted"
    wait_for(
        "a ProviderDeprecated Warning event",
        lambda: [
            e
            for e in events(kube, namespace, "stream")
            if e["type"] == "Warning" and e["reason"] == "ProviderDeprecated"
        ],
    )
    # affinity off: the routing objects go, the main Service stays
    doc["spec"]["routing"] = {"sessionAffinity": "ClientIP"}
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "stream", 2)
    assert kube.get("v1", "Service", namespace, "stream-headless") is None
    assert kube.get("networking.k8s.io/v1", "Ingress", namespace, "stream-http") is None
    assert kube.get("networking.k8s.io/v1", "Ingress", namespace, "stream-grpc") is None
    svc = kube.get("v1", "Service", namespace, "stream")
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    assert svc["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] == 10800
    assert condition(cr, "RoutingConfigured")["reason"] == "ServiceAffinity"


@pytest.mark.parametrize(
    ("provider", "implementation", "missing"),
    [
        ("istio", None, "DestinationRule (networking.istio.io/v1)"),
        ("gateway-api", None, "Gateway (gateway.networking.k8s.io/v1)"),  # the lookup finds no Gateway API
        (
            "gateway-api",
            "standard",
            "HTTPRoute (gateway.networking.k8s.io/v1), GRPCRoute (gateway.networking.k8s.io/v1)",
        ),
        (
            "gateway-api",
            "envoy-gateway",
            "HTTPRoute (gateway.networking.k8s.io/v1), GRPCRoute (gateway.networking.k8s.io/v1), "
            "BackendTrafficPolicy (gateway.envoyproxy.io/v1alpha1)",
        ),
    ],
)
def test_provider_not_installed_is_a_condition_and_everything_else_is_applied(
    kube, namespace, run_operator, provider, implementation, missing
):
    op = run_operator({"TRITONPIPELINE_SHARED_GATEWAY_NAMESPACES": GATEWAY["namespace"]})
    kube.apply(routed("stream", namespace, provider, implementation=implementation))
    cr = wait_reconciled(kube, namespace, "stream")
    routing = condition(cr, "RoutingConfigured")
    assert (routing["status"], routing["reason"]) == ("False", "ProviderNotInstalled")
    assert missing in routing["message"]
    kids = children(kube, namespace, "stream")
    assert kids["deployment"] is not None and kids["service"] is not None and kids["configmaps"]
    assert kube.get("v1", "Service", namespace, "stream-headless") is not None
    assert condition(cr, "SpecValid")["status"] == "True"
    assert condition(cr, "ModelsConfigured")["status"] == "True"
    wait_for(
        "a ProviderNotInstalled Warning event",
        lambda: [e for e in events(kube, namespace, "stream") if e["reason"] == "ProviderNotInstalled"],
    )
    assert op.proc is not None and op.proc.poll() is None
    assert "Traceback" not in op.text()


def test_keda_without_its_crd_is_a_condition(kube, namespace, run_operator):
    op = run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["autoscaling"] = {"maxReplicas": 3, "engine": "keda"}
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision")
    scaling = condition(cr, "AutoscalingConfigured")
    assert (scaling["status"], scaling["reason"]) == ("False", "KedaNotInstalled")
    assert "ScaledObject (keda.sh/v1alpha1)" in scaling["message"]
    kids = children(kube, namespace, "vision")
    assert kids["hpa"] is None and kids["deployment"] is not None
    assert op.proc is not None and op.proc.poll() is None


def test_hpa_condition_shows_the_query(kube, namespace, run_operator):
    run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["autoscaling"] = {"maxReplicas": 3, "metric": "pendingRequests", "target": 4}
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "vision")
    scaling = condition(cr, "AutoscalingConfigured")
    assert (scaling["status"], scaling["reason"]) == ("True", "HorizontalPodAutoscaler")
    assert autoscaling_objects.pipeline_query(parse_pipeline(doc), "pendingRequests") in scaling["message"]
    hpa = children(kube, namespace, "vision")["hpa"]
    metric = hpa["spec"]["metrics"][0]["pods"]["metric"]
    assert metric["name"] == "triton_pending_requests"
    assert metric["selector"]["matchExpressions"] == [
        {"key": "model", "operator": "NotIn", "values": ["vision"]}
    ]


def test_sequences_without_affinity_warn(kube, namespace, run_operator):
    run_operator()
    doc = cluster_doc("stream", namespace, "streaming")  # 2 replicas
    doc["spec"]["routing"] = {"sessionAffinity": "None"}
    kube.apply(doc)
    cr = wait_reconciled(kube, namespace, "stream")
    affinity = condition(cr, "SessionAffinity")
    assert (affinity["status"], affinity["reason"]) == ("False", "SequencesWillBreak")
    assert "accumulator" in affinity["message"] and "2 replicas" in affinity["message"]
    warning = wait_for(
        "a SequencesWillBreak Warning event",
        lambda: [
            e
            for e in events(kube, namespace, "stream")
            if e["type"] == "Warning" and e["reason"] == "SequencesWillBreak"
        ],
    )
    assert "routing.sessionAffinity" in warning[0]["message"]
    assert children(kube, namespace, "stream")["deployment"]["spec"]["replicas"] == 2  # still applied
    # one replica: nothing to break
    doc["spec"]["server"]["replicas"] = 1
    kube.apply(doc)
    wait_for(
        "SessionAffinity=True",
        condition_is(kube, namespace, "stream", "SessionAffinity", "True", "NotNeeded"),
    )


# ------------------------------------------------------------------------------ clusters with provider CRDs


def crd_documents(tool: str, names: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The CRDs a tool of e2e/build-gotool.sh fetched (built on first use), optionally only `names`."""
    try:
        file = ensure_tool(tool)
    except ToolUnavailable as err:
        pytest.skip(f"{tool} unavailable: {err}")
    except ToolError as err:
        pytest.fail(f"fetching {tool} failed: {err}", pytrace=False)
    docs = [
        d
        for d in yaml.safe_load_all(Path(file).read_text())
        if d and d.get("kind") == "CustomResourceDefinition"
    ]
    if names:
        docs = [d for d in docs if d["metadata"]["name"] in names]
        assert len(docs) == len(names), f"{tool}: expected {names}"
    return docs


KEDA = ("keda-crd", ())
ISTIO = ("istio-crds", ("destinationrules.networking.istio.io",))
GATEWAY_EXPERIMENTAL = ("gateway-api-crds", ())
GATEWAY_STANDARD = ("gateway-api-standard-crds", ())
ENVOY_GATEWAY = ("envoy-gateway-crds", ())


def install(kube: Kube, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        kube.apply(doc)
    for doc in docs:
        wait_established(kube, doc["metadata"]["name"])


class Plane:
    def __init__(self, cp: Any, kube: Kube, workdir: Path) -> None:
        self.cp, self.kube, self.workdir = cp, kube, workdir

    def namespace(self) -> str:
        ns = f"p-{uuid.uuid4().hex[:8]}"
        self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        return ns

    def operator(self, ns: str, env: dict[str, str] | None = None) -> LocalOperator:
        """The operator watching `ns`; the shared Gateways of these tests are in GATEWAY's namespace."""
        env = {"TRITONPIPELINE_SHARED_GATEWAY_NAMESPACES": GATEWAY["namespace"], **(env or {})}
        return LocalOperator(self.cp.kubeconfig, ns, self.workdir / f"operator-{ns}.log", env=env).start()


@pytest.fixture(scope="module")
def plane_factory(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """fresh(crds) -> a new kube-apiserver + etcd with our CRD and the given third-party CRDs."""
    from harness.controlplane import ControlPlane

    started: list[Any] = []

    def fresh(*tools: tuple[str, tuple[str, ...]]) -> Plane:
        docs = [d for tool, names in tools for d in crd_documents(tool, names)]
        workdir = tmp_path_factory.mktemp("plane")
        cp = ControlPlane(workdir / "cp", control_plane.binaries).start()
        started.append(cp)
        kube = Kube(cp.api_client(), "test-admin")
        install(kube, [crd(), *docs])
        return Plane(cp, kube, workdir)

    yield fresh
    for cp in started:
        cp.stop()


@pytest.fixture(scope="module")
def providers(plane_factory: Any) -> Plane:
    """A cluster with KEDA's ScaledObject, Istio's DestinationRule, the Gateway API's experimental
    channel (GatewayClass, Gateway, HTTPRoute, GRPCRoute) and Envoy Gateway's BackendTrafficPolicy;
    GatewayClasses of three controllers and a Gateway of each (gateway_classes)."""
    plane = plane_factory(KEDA, ISTIO, GATEWAY_EXPERIMENTAL, ENVOY_GATEWAY)
    gateway_classes(plane.kube)
    return plane


# GatewayClass -> controllerName, and the Gateway in namespace "gateways" of each
CONTROLLERS = {
    "eg": "gateway.envoyproxy.io/gatewayclass-controller",
    "istio": "istio.io/gateway-controller",
    "traefik": "traefik.io/gateway-controller",  # one the operator knows no hash policy for
}
GATEWAYS = {"public": "eg", "mesh": "istio", "edge": "traefik"}


def gateway(name: str, gateway_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": GATEWAY["namespace"]},
        "spec": {
            "gatewayClassName": gateway_class,
            "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}],
        },
    }


def gateway_classes(kube: Kube) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY["namespace"]}})
    for name, controller in CONTROLLERS.items():
        kube.apply(
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": {"name": name},
                "spec": {"controllerName": controller},
            }
        )
    for name, gateway_class in GATEWAYS.items():
        kube.apply(gateway(name, gateway_class))


ROUTINGS = [
    {"sessionAffinity": "None"},
    {"sessionAffinity": "ClientIP"},
    {"sessionAffinity": "Header", "provider": "ingress-nginx", "host": "t.example.com",
     "ingressClassName": "nginx", "tlsSecretName": "t-tls"},
    {"sessionAffinity": "Header", "provider": "istio"},
    *({"sessionAffinity": "Header", "provider": "gateway-api", "host": "t.example.com",
       "gateway": {"name": "public", "namespace": "gateways", "sectionName": "https",
                   "implementation": implementation}}
      for implementation in ("envoy-gateway", "istio", "standard")),
]  # fmt: skip
# NGINX Gateway Fabric's UpstreamSettingsPolicy is not among them: its Go module is not served by the
# module proxy, so no CRD of it can be installed here (its rendering is tested in test_routing_autoscaling)


@pytest.mark.parametrize("source", ["fanout", "streaming"])
def test_apiserver_accepts_every_generated_object(providers, source):
    """Each metric x engine, stateful and not, and each routing mode: every child the operator can render
    passes the real apiserver's strict validation against the real CRDs."""
    ns = providers.namespace()
    checked: dict[str, int] = {}
    variants = [
        {"routing": routing, "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "metric": metric,
                                             "engine": engine, "target": 12.5}}
        for routing in ROUTINGS
        for metric in autoscaling_objects.METRICS
        for engine in ("hpa", "keda")
    ]  # fmt: skip
    for variant in variants:
        doc = cluster_doc(source, ns, source)
        doc["spec"].update(copy.deepcopy(variant))
        tp = parse_pipeline(doc)
        kids = render_children(tp, compile_pipeline(tp), Settings())
        objects = [
            *kids.all(),
            *kids.routing.provider_objects,
            *([kids.scaled_object] if kids.scaled_object else []),
        ]
        for obj in objects:
            result = dry_run_apply(providers.kube, obj)
            assert result["kind"] == obj["kind"]
            implementation = (variant["routing"].get("gateway") or {}).get("implementation")
            if obj["kind"] in ("HTTPRoute", "GRPCRoute") and implementation == "standard":
                assert result["spec"]["rules"][0]["sessionPersistence"] == {
                    "sessionName": "x-triton-sequence-id",
                    "type": "Header",
                }
            if obj["kind"] == "BackendTrafficPolicy":  # as written, after the CRD's defaults
                assert result["spec"]["loadBalancer"]["consistentHash"]["headers"] == [
                    {"name": "x-triton-sequence-id"}
                ]
            if obj["kind"] == "HorizontalPodAutoscaler" and source == "streaming":
                assert result["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
            checked[obj["kind"]] = checked.get(obj["kind"], 0) + 1
    print(f"\n{source}: strict server-side dry run accepted {checked}")
    assert checked["HorizontalPodAutoscaler"] == checked["ScaledObject"] == len(ROUTINGS) * 3
    kinds = {"Ingress", "DestinationRule", "HTTPRoute", "GRPCRoute", "BackendTrafficPolicy", "Deployment"}
    assert kinds <= set(checked)


def test_operator_creates_provider_objects_when_their_crds_exist(providers):
    kube = providers.kube
    ns = providers.namespace()
    op = providers.operator(ns)
    try:
        kube.apply(routed("mesh", ns, "istio"))
        kube.apply(routed("gw", ns, "gateway-api"))
        keda = cluster_doc("scaled", ns, "streaming")
        keda["spec"]["routing"] = {"sessionAffinity": "ClientIP"}
        keda["spec"]["autoscaling"] = {"maxReplicas": 4, "engine": "keda", "metric": "pendingRequests"}
        kube.apply(keda)
        for name in ("mesh", "gw", "scaled"):
            wait_reconciled(kube, ns, name)
        mesh = get_cr(kube, ns, "mesh")
        assert condition(mesh, "RoutingConfigured")["reason"] == "Configured"
        dr = kube.get("networking.istio.io/v1", "DestinationRule", ns, "mesh")
        assert dr["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"] == {
            "httpHeaderName": "x-triton-sequence-id"
        }
        gw = get_cr(kube, ns, "gw")
        assert condition(gw, "RoutingConfigured")["reason"] == "Configured", condition(
            gw, "RoutingConfigured"
        )
        assert "hashed by envoy-gateway" in condition(gw, "RoutingConfigured")["message"]
        for kind in ("HTTPRoute", "GRPCRoute"):
            route = kube.get("gateway.networking.k8s.io/v1", kind, ns, "gw")
            assert "sessionPersistence" not in route["spec"]["rules"][0]  # the policy hashes instead
            assert route["spec"]["parentRefs"] == [
                {"group": "gateway.networking.k8s.io", "kind": "Gateway", **GATEWAY}  # defaulted by the CRD
            ]
        policy = kube.get("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", ns, "gw")
        assert policy["spec"]["loadBalancer"]["consistentHash"]["headers"] == [
            {"name": "x-triton-sequence-id"}
        ]
        assert policy["metadata"]["ownerReferences"][0]["name"] == "gw"
        scaled = get_cr(kube, ns, "scaled")
        scaling = condition(scaled, "AutoscalingConfigured")
        assert (scaling["status"], scaling["reason"]) == ("True", "ScaledObject")
        so = kube.get("keda.sh/v1alpha1", "ScaledObject", ns, "scaled")
        query = so["spec"]["triggers"][0]["metadata"]["query"]
        assert query == autoscaling_objects.pipeline_query(parse_pipeline(keda), "pendingRequests")
        assert query in scaling["message"]
        assert kube.get("autoscaling/v2", "HorizontalPodAutoscaler", ns, "scaled") is None  # KEDA makes it
        # switching engine and provider prunes what is no longer rendered
        keda["spec"]["autoscaling"]["engine"] = "hpa"
        kube.apply(keda)
        wait_reconciled(kube, ns, "scaled", 2)
        assert kube.get("keda.sh/v1alpha1", "ScaledObject", ns, "scaled") is None
        assert kube.get("autoscaling/v2", "HorizontalPodAutoscaler", ns, "scaled") is not None
        mesh_doc = routed("mesh", ns, "ingress-nginx")
        kube.apply(mesh_doc)
        wait_reconciled(kube, ns, "mesh", 2)
        assert kube.get("networking.istio.io/v1", "DestinationRule", ns, "mesh") is None
        assert kube.get("networking.k8s.io/v1", "Ingress", ns, "mesh-http") is not None
        assert op.proc is not None and op.proc.poll() is None
    except BaseException:
        print(f"\n===== operator log =====\n{op.text()[-6000:]}")
        raise
    finally:
        op.stop()


def test_gateway_api_crds_installed_later_standard_then_experimental(plane_factory):
    """Implementation `standard` (the routes' own sessionPersistence). No Gateway API at first
    (ProviderNotInstalled); then the standard-channel CRDs, which lack
    sessionPersistence: the apiserver refuses the routes (server-side apply of an undeclared field) and
    the operator says why (ProviderRejected); then the experimental channel: Configured. Each step is
    picked up by the resync loop, with no change to the pipeline."""
    plane = plane_factory()
    kube = plane.kube
    ns = plane.namespace()
    op = plane.operator(ns, {"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    try:
        doc = routed("gw", ns, "gateway-api", implementation="standard")
        kube.apply(doc)
        wait_for(
            "ProviderNotInstalled",
            condition_is(kube, ns, "gw", "RoutingConfigured", "False", "ProviderNotInstalled"),
        )
        assert kube.get("v1", "Service", ns, "gw-headless") is not None

        standard = crd_documents(*GATEWAY_STANDARD)
        tp = parse_pipeline(doc)
        route = render_children(tp, compile_pipeline(tp), Settings()).routing.provider_objects[0]
        install(kube, standard)
        with pytest.raises(KubeError) as err:  # strict validation names the field standard lacks
            dry_run_apply(kube, route)
        assert "sessionPersistence: field not declared in schema" in str(err.value)
        rejected = wait_for(
            "ProviderRejected",
            condition_is(kube, ns, "gw", "RoutingConfigured", "False", "ProviderRejected"),
            timeout=30,
        )
        assert "standard-channel" in rejected["message"], rejected
        wait_for(  # a new problem is an event even when a resync (not a user's change) found it
            "a ProviderRejected Warning event",
            lambda: [e for e in events(kube, ns, "gw") if e["reason"] == "ProviderRejected"],
        )
        assert get(kube, "gateway.networking.k8s.io/v1", "HTTPRoute", ns, "gw") is None
        assert kube.get("apps/v1", "Deployment", ns, "gw") is not None

        install(kube, crd_documents(*GATEWAY_EXPERIMENTAL))
        wait_for(
            "Configured", condition_is(kube, ns, "gw", "RoutingConfigured", "True", "Configured"), timeout=30
        )
        stored = kube.get("gateway.networking.k8s.io/v1", "HTTPRoute", ns, "gw")
        assert stored["spec"]["rules"][0]["sessionPersistence"]["sessionName"] == "x-triton-sequence-id"
        assert get(kube, API, "TritonPipeline", ns, "gw")["metadata"]["generation"] == 1
        assert op.proc is not None and op.proc.poll() is None
    except BaseException:
        print(f"\n===== operator log =====\n{op.text()[-6000:]}")
        raise
    finally:
        op.stop()


def test_gateway_implementation_is_read_from_its_gateway_class(providers):
    """provider gateway-api without implementation: the operator reads the Gateway's GatewayClass and
    renders that controller's hash policy next to the routes (Envoy Gateway: BackendTrafficPolicy;
    Istio: DestinationRule); an unknown controller or a missing Gateway gets no route, a False condition
    and a Warning event, until the Gateway appears (the resync picks it up); moving to another Gateway
    prunes the old policy."""
    kube = providers.kube
    ns = providers.namespace()
    op = providers.operator(ns, {"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    route_api = "gateway.networking.k8s.io/v1"
    with operator_log_on_failure(op):
        edge = routed("edge", ns, "gateway-api", gateway={"name": "edge", "namespace": "gateways"})
        later = routed("later", ns, "gateway-api", gateway={"name": "later", "namespace": "gateways"})
        kube.apply(edge)
        kube.apply(later)
        unknown = wait_for(
            "UnknownGatewayImplementation",
            condition_is(kube, ns, "edge", "RoutingConfigured", "False", "UnknownGatewayImplementation"),
        )
        assert "traefik.io/gateway-controller" in unknown["message"]
        assert "routing.gateway.implementation" in unknown["message"]
        assert get(kube, route_api, "HTTPRoute", ns, "edge") is None  # never a route without affinity
        assert get(kube, route_api, "GRPCRoute", ns, "edge") is None
        wait_for(
            "an UnknownGatewayImplementation Warning event",
            lambda: [e for e in events(kube, ns, "edge") if e["reason"] == "UnknownGatewayImplementation"],
        )
        missing = wait_for(
            "GatewayNotFound",
            condition_is(kube, ns, "later", "RoutingConfigured", "False", "GatewayNotFound"),
        )
        assert "Gateway gateways/later does not exist" in missing["message"]
        assert kube.get("apps/v1", "Deployment", ns, "later") is not None  # the rest is applied

        kube.apply(gateway("later", "eg"))  # the Gateway appears: the resync finds it
        wait_for(
            "Configured after the Gateway appeared",
            condition_is(kube, ns, "later", "RoutingConfigured", "True", "Configured"),
            timeout=30,
        )
        assert kube.get("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", ns, "later") is not None
        assert kube.get(route_api, "GRPCRoute", ns, "later") is not None

        # the same pipeline moved to a Gateway that Istio serves: a DestinationRule, the Envoy policy pruned
        moved = routed("later", ns, "gateway-api", gateway={"name": "mesh", "namespace": "gateways"})
        kube.apply(moved)
        wait_reconciled(kube, ns, "later", 2)
        configured = condition(get_cr(kube, ns, "later"), "RoutingConfigured")
        assert configured["reason"] == "Configured" and "hashed by istio" in configured["message"]
        rule = kube.get("networking.istio.io/v1", "DestinationRule", ns, "later")
        assert rule["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"] == {
            "httpHeaderName": "x-triton-sequence-id"
        }
        assert get(kube, "gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", ns, "later") is None
        route = kube.get(route_api, "HTTPRoute", ns, "later")
        assert route["spec"]["parentRefs"][0]["name"] == "mesh"

        # named in the spec, the implementation wins over the GatewayClass
        edge["spec"]["routing"]["gateway"]["implementation"] = "envoy-gateway"
        kube.apply(edge)
        wait_for(
            "Configured with the implementation named",
            condition_is(kube, ns, "edge", "RoutingConfigured", "True", "Configured"),
            timeout=30,
        )
        assert kube.get("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy", ns, "edge") is not None
        assert op.proc is not None and op.proc.poll() is None


def test_a_gateway_of_a_namespace_not_shared_is_not_read_for_a_pipeline(providers):
    """Issue 54: a pipeline naming a Gateway of another namespace learnt from its status whether that
    Gateway exists and which controller serves it. Now the operator reads Gateways of the pipeline's own
    namespace and of the shared ones only: elsewhere the status says the same whether the Gateway exists
    or not, and no route is created until the pipeline names its implementation."""
    kube = providers.kube
    ns = providers.namespace()
    op = providers.operator(ns, {"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    with operator_log_on_failure(op):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "private-gw"}})
        kube.apply({**gateway("secret", "eg"), "metadata": {"name": "secret", "namespace": "private-gw"}})
        found = routed("found", ns, "gateway-api", gateway={"name": "secret", "namespace": "private-gw"})
        absent = routed("absent", ns, "gateway-api", gateway={"name": "nothing", "namespace": "private-gw"})
        kube.apply(found)
        kube.apply(absent)
        messages = []
        for name in ("found", "absent"):
            reported = wait_for(
                f"{name}: GatewayNotLookedUp",
                condition_is(kube, ns, name, "RoutingConfigured", "False", "GatewayNotLookedUp"),
            )
            messages.append(reported["message"].replace("/secret", "/X").replace("/nothing", "/X"))
            assert get(kube, "gateway.networking.k8s.io/v1", "HTTPRoute", ns, name) is None
        assert messages[0] == messages[1]
        assert "routing.gateway.implementation" in messages[0]
        # named, the implementation needs no lookup: the routes attach
        found["spec"]["routing"]["gateway"]["implementation"] = "envoy-gateway"
        kube.apply(found)
        wait_for(
            "Configured with the implementation named",
            condition_is(kube, ns, "found", "RoutingConfigured", "True", "Configured"),
            timeout=30,
        )


# Istio before 1.22: no networking.istio.io/v1
OLD_ISTIO_CRD = schemaless_crd("networking.istio.io/v1beta1", "DestinationRule", "destinationrules")


def test_older_istio_gets_a_v1beta1_destination_rule(control_plane, tmp_path):
    """A cluster whose Istio serves DestinationRule as v1beta1 only (before 1.22) gets the rule at that
    version instead of ProviderNotInstalled. A private apiserver: the shared one has today's Istio CRDs."""
    with private_cluster(control_plane.binaries, tmp_path, "mesh") as (cp, k):
        k.apply(OLD_ISTIO_CRD)
        wait_for(
            "the v1beta1 DestinationRule",
            lambda: k.resource_exists("networking.istio.io/v1beta1", "DestinationRule"),
        )
        assert not k.resource_exists("networking.istio.io/v1", "DestinationRule")
        op = LocalOperator(cp.kubeconfig, "mesh", tmp_path / "operator.log").start()
        with operator_log_on_failure(op):
            k.apply(routed("mesh", "mesh", "istio"))
            cr = wait_reconciled(k, "mesh", "mesh")
            routing = condition(cr, "RoutingConfigured")
            assert (routing["status"], routing["reason"]) == ("True", "Configured"), routing
            rule = k.get("networking.istio.io/v1beta1", "DestinationRule", "mesh", "mesh")
            assert rule is not None
            assert rule["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"] == {
                "httpHeaderName": "x-triton-sequence-id"
            }
