"""Pure renderers of session-affinity routing and autoscaling (render/routing_objects.py,
render/autoscaling_objects.py), the client helper's header, and the chart's generated prometheus-adapter
rules. Here the pure tests; those on real components are in tests/component/test_routing_autoscaling.py."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import yaml

from helpers import ROOT, example
from support.routing_autoscaling import children, doc
from tritonpipeline.client import DEFAULT_HEADER, AsyncTritonClient, TritonClient, affinity_headers
from tritonpipeline.errors import SpecError
from tritonpipeline.render import autoscaling_objects, routing_objects
from tritonpipeline.render.manifests import with_engine
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

ADAPTER_RULES = ROOT / "charts" / "triton-pipeline" / "files" / "prometheus-adapter-rules.yaml"


# --------------------------------------------------------------------------------------------- ClientIP


@pytest.mark.parametrize(
    ("idle_us", "timeout"),
    [
        (5_000_000, 10800),  # 5 s: Kubernetes' default of 3 h already covers it
        (1, 10800),
        (4 * 3600 * 1_000_000 + 1, 4 * 3600 + 1),  # 4 h + 1 µs rounds up to the next second
        (86400 * 1_000_000, 86400),
        (90000 * 1_000_000, 86400),  # the API's maximum
    ],
)
def test_client_ip_timeout_covers_the_longest_sequence_idle_time(idle_us, timeout):
    d = doc(routing={"sessionAffinity": "ClientIP"})
    d["spec"]["models"][1]["sequenceBatching"]["maxSequenceIdleMicroseconds"] = idle_us
    _, kids = children(d)
    svc = kids.service["spec"]
    assert svc["sessionAffinity"] == "ClientIP"
    assert svc["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] == timeout
    assert kids.routing.objects == () and kids.routing.provider_objects == ()


def test_client_ip_takes_the_longest_idle_of_several_sequence_models():
    d = doc(routing={"sessionAffinity": "ClientIP"})
    second = copy.deepcopy(d["spec"]["models"][1])
    second["name"] = "accumulator2"
    second["sequenceBatching"]["maxSequenceIdleMicroseconds"] = 5 * 3600 * 1_000_000
    d["spec"]["models"].append(second)
    tp = parse_pipeline(d)
    assert routing_objects.longest_idle_seconds(tp) == 5 * 3600
    assert routing_objects.client_ip_timeout(tp) == 5 * 3600


def test_no_affinity_renders_no_routing_objects():
    _, kids = children(doc(routing={"sessionAffinity": "None"}))
    assert "sessionAffinity" not in kids.service["spec"]
    assert kids.routing.objects == () and kids.routing.provider_objects == ()


# --------------------------------------------------------------------------------------------- Header


def test_header_ingress_nginx_headless_service_and_two_ingresses():
    _, kids = children(doc(routing={"sessionAffinity": "Header", "provider": "ingress-nginx"}))
    (headless,) = kids.routing.objects
    assert headless["metadata"]["name"] == "streaming-headless"
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == kids.service["spec"]["selector"]
    assert [p["name"] for p in headless["spec"]["ports"]] == ["http", "grpc"]  # no metrics: scraped once
    assert headless["metadata"]["labels"]["app.kubernetes.io/component"] == "routing"
    assert kids.routing.provider_apis == (("networking.k8s.io/v1", "Ingress"),)
    http, grpc = kids.routing.provider_objects
    for ing in (http, grpc):
        assert (
            ing["metadata"]["annotations"][routing_objects.HASH_BY_ANNOTATION] == "$http_x_triton_sequence_id"
        )
        assert ing["metadata"]["namespace"] == "ml"
        backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
        assert backend["name"] == "streaming-headless"
    assert http["spec"]["rules"][0]["http"]["paths"][0]["path"] == "/v2"
    assert routing_objects.BACKEND_PROTOCOL_ANNOTATION not in http["metadata"]["annotations"]
    assert grpc["metadata"]["annotations"][routing_objects.BACKEND_PROTOCOL_ANNOTATION] == "GRPC"
    assert grpc["spec"]["rules"][0]["http"]["paths"][0] == {
        "path": "/inference.GRPCInferenceService",
        "pathType": "Prefix",
        "backend": {"service": {"name": "streaming-headless", "port": {"name": "grpc"}}},
    }
    assert "host" not in http["spec"]["rules"][0] and "ingressClassName" not in http["spec"]


def test_header_ingress_options_and_custom_header():
    _, kids = children(
        doc(
            routing={
                "sessionAffinity": "Header",
                "provider": "ingress-nginx",
                "header": "X-Stream-Key",
                "host": "triton.example.com",
                "ingressClassName": "nginx",
                "tlsSecretName": "triton-tls",
            }
        )
    )
    http, grpc = kids.routing.provider_objects
    assert http["metadata"]["annotations"][routing_objects.HASH_BY_ANNOTATION] == "$http_x_stream_key"
    for ing in (http, grpc):
        assert ing["spec"]["ingressClassName"] == "nginx"
        assert ing["spec"]["rules"][0]["host"] == "triton.example.com"
        assert ing["spec"]["tls"] == [{"hosts": ["triton.example.com"], "secretName": "triton-tls"}]


def test_the_streaming_example_routes_grpc_through_a_tls_listener():
    """The example as shipped: gateway-api (the default) with a host and a Gateway listener named https;
    its comment shows that listener with TLS and GRPCRoute allowed (gRPC needs HTTP/2 end to end), and
    the Gateway in it is the one the routing refers to."""
    from tritonpipeline.render import checks

    text = (ROOT / "examples" / "streaming.yaml").read_text()
    shown = yaml.safe_load(
        "\n".join(line.split("#   ", 1)[1] for line in text.splitlines() if line.lstrip().startswith("#   "))
    )
    (listener,) = shown["spec"]["listeners"]
    assert listener["protocol"] == "HTTPS" and listener["tls"]["mode"] == "Terminate"
    assert {"kind": "GRPCRoute"} in listener["allowedRoutes"]["kinds"]
    tp, kids = children(doc())  # the example's own routing
    assert tp.spec.routing.provider == "gateway-api"
    assert tp.spec.routing.host == listener["hostname"]
    gateway = tp.spec.routing.gateway
    assert gateway is not None and gateway.implementation is None  # read from the GatewayClass
    assert (gateway.name, gateway.namespace, gateway.section_name) == (
        shown["metadata"]["name"], shown["metadata"]["namespace"], listener["name"],
    )  # fmt: skip
    assert kids.routing.gateway_pending and kids.routing.provider_objects == ()
    resolved = routing_objects.routing_children(tp, Settings(), "envoy-gateway")
    grpc = next(o for o in resolved.provider_objects if o["kind"] == "GRPCRoute")
    assert grpc["spec"]["parentRefs"] == [
        {"name": "inference", "namespace": "gateways", "sectionName": "https"}
    ]
    assert grpc["spec"]["hostnames"] == ["streaming.example.com"]
    assert not [w for w in checks.warnings(tp) if w.path.startswith("spec.routing")]


@pytest.mark.parametrize(
    ("route", "warned"),
    [
        ({"sessionAffinity": "Header", "provider": "ingress-nginx"}, True),
        ({"sessionAffinity": "Header", "provider": "ingress-nginx", "tlsSecretName": "t"}, False),
        ({"sessionAffinity": "Header", "provider": "istio"}, False),
        ({"sessionAffinity": "ClientIP"}, False),
    ],
)
def test_a_grpc_ingress_without_tls_is_warned_at_its_field(route, warned):
    from tritonpipeline.render import checks

    found = [
        w
        for w in checks.warnings(parse_pipeline(doc(routing=route)))
        if w.path == "spec.routing.tlsSecretName"
    ]
    assert [("streaming-grpc" in w.message and "HTTP/2" in w.message) for w in found] == (
        [True] if warned else []
    )


def test_header_istio_destination_rule_on_the_cluster_ip_service():
    _, kids = children(doc(routing={"sessionAffinity": "Header", "provider": "istio"}))
    (dr,) = kids.routing.provider_objects
    assert (dr["apiVersion"], dr["kind"]) == ("networking.istio.io/v1", "DestinationRule")
    assert dr["spec"] == {
        "host": "streaming",
        "trafficPolicy": {"loadBalancer": {"consistentHash": {"httpHeaderName": "x-triton-sequence-id"}}},
    }
    assert len(kids.routing.objects) == 1  # the headless Service is there for every provider


GATEWAY = {"name": "public", "namespace": "gateways", "sectionName": "http"}


def gateway_doc(implementation: str | None = None, **more: Any) -> dict[str, Any]:
    gateway = {**GATEWAY, **({"implementation": implementation} if implementation else {})}
    return doc(routing={"sessionAffinity": "Header", "gateway": gateway, "host": "t.io", **more})


def test_header_gateway_api_is_the_default_provider_and_needs_the_implementation():
    tp, kids = children(gateway_doc())
    assert tp.spec.routing.provider == "gateway-api"
    assert routing_objects.needs_gateway_lookup(tp)
    # nothing but the headless Service until the operator knows whose policy hashes the header
    assert kids.routing.gateway_pending and kids.routing.provider_objects == ()
    assert [o["kind"] for o in kids.routing.objects] == ["Service"]
    assert "GatewayClass" in kids.routing.description


@pytest.mark.parametrize("implementation", ["envoy-gateway", "istio", "nginx-gateway-fabric", "standard"])
def test_header_gateway_api_routes(implementation):
    tp, _ = children(gateway_doc())
    kids = routing_objects.routing_children(tp, Settings(), implementation)
    http, grpc = kids.provider_objects[:2]
    assert (http["kind"], grpc["kind"]) == ("HTTPRoute", "GRPCRoute")
    for route in (http, grpc):
        assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
        assert route["spec"]["parentRefs"] == [GATEWAY]
        assert route["spec"]["hostnames"] == ["t.io"]
        (rule,) = route["spec"]["rules"]
        # only `standard` relies on sessionPersistence: the others hash with their own policy
        assert ("sessionPersistence" in rule) == (implementation == "standard")
    assert http["spec"]["rules"][0]["backendRefs"] == [{"name": "streaming", "port": 8000}]
    assert grpc["spec"]["rules"][0]["matches"] == [
        {"method": {"type": "Exact", "service": "inference.GRPCInferenceService"}}
    ]
    assert grpc["spec"]["rules"][0]["backendRefs"] == [{"name": "streaming", "port": 8001}]
    served = {(o["apiVersion"], o["kind"]) for o in kids.provider_objects}
    assert served == set(kids.provider_apis)  # every kind rendered is checked for being served
    possible = {(a, k, n) for a, k, n in routing_objects.possible_names(tp.name)}
    assert {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in kids.provider_objects} <= possible


def test_envoy_gateway_hashes_the_header_on_both_routes():
    tp, _ = children(gateway_doc(header="X-Stream-Key"))
    *_, policy = routing_objects.routing_children(tp, Settings(), "envoy-gateway").provider_objects
    assert (policy["apiVersion"], policy["kind"]) == (
        "gateway.envoyproxy.io/v1alpha1",
        "BackendTrafficPolicy",
    )
    assert policy["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "streaming"},
        {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute", "name": "streaming"},
    ]
    assert policy["spec"]["loadBalancer"] == {
        "type": "ConsistentHash",
        "consistentHash": {"type": "Headers", "headers": [{"name": "X-Stream-Key"}]},
    }


def test_istio_gateway_gets_the_destination_rule_of_the_backend_service():
    tp, _ = children(gateway_doc())
    *_, policy = routing_objects.routing_children(tp, Settings(), "istio").provider_objects
    assert policy == routing_objects.destination_rule(tp, routing_objects.routing_metadata(tp, Settings()))
    assert policy["spec"]["host"] == "streaming"  # the routes' backend Service


def test_nginx_gateway_fabric_hashes_consistently_on_the_header_variable():
    tp, _ = children(gateway_doc(header="X-Stream-Key"))
    *_, policy = routing_objects.routing_children(tp, Settings(), "nginx-gateway-fabric").provider_objects
    assert (policy["apiVersion"], policy["kind"]) == ("gateway.nginx.org/v1alpha1", "UpstreamSettingsPolicy")
    assert policy["spec"] == {
        "targetRefs": [{"group": "", "kind": "Service", "name": "streaming"}],
        "loadBalancingMethod": "hash consistent",
        "hashMethodKey": "$http_x_stream_key",
    }


def test_nginx_gateway_fabric_cannot_hash_a_header_with_digits():
    """Its hashMethodKey must match ^\\$[a-z_]+$: named in the spec, it is refused at the header; read from
    the GatewayClass, no route is rendered and the reason says why."""
    with pytest.raises(SpecError) as err:
        parse_pipeline(gateway_doc("nginx-gateway-fabric", header="x-seq2"))
    assert "spec.routing.header" in str(err.value) and "letters" in str(err.value)
    tp, _ = children(gateway_doc(header="x-seq2"))
    problem = routing_objects.gateway_problem(tp, "nginx-gateway-fabric")
    assert problem is not None and "x-seq2" in problem and "gateways/public" in problem
    assert routing_objects.routing_children(tp, Settings(), "nginx-gateway-fabric").gateway_pending
    assert routing_objects.gateway_problem(tp, "envoy-gateway") is None


@pytest.mark.parametrize(
    ("controller", "implementation"),
    [
        ("gateway.envoyproxy.io/gatewayclass-controller", "envoy-gateway"),
        ("istio.io/gateway-controller", "istio"),
        ("gateway.nginx.org/nginx-gateway-controller", "nginx-gateway-fabric"),
        ("traefik.io/gateway-controller", None),
        ("", None),
    ],
)
def test_implementation_from_the_gateway_class_controller_name(controller, implementation):
    assert routing_objects.implementation_of(controller) == implementation


def test_unknown_implementation_says_what_is_missing():
    message = routing_objects.unknown_implementation(
        "gateways/public", "traefik", "traefik.io/gateway-controller"
    )
    assert "traefik.io/gateway-controller" in message and "no route is created" in message
    assert "routing.gateway.implementation" in message
    for name in routing_objects.GATEWAY_CONTROLLERS:
        assert name in message


def test_implementation_named_in_the_spec_needs_no_lookup():
    tp, kids = children(gateway_doc("envoy-gateway"))
    assert not routing_objects.needs_gateway_lookup(tp) and not kids.routing.gateway_pending
    assert [o["kind"] for o in kids.routing.provider_objects] == [
        "HTTPRoute",
        "GRPCRoute",
        "BackendTrafficPolicy",
    ]


def test_standard_session_persistence_does_not_claim_routing_by_the_clients_key():
    """sessionPersistence pins sessions by a gateway-issued value, not by the client's sequence ID: status
    and validate say so instead of claiming the header routes; the hashing implementations do not."""
    from tritonpipeline.render import checks

    tp, kids = children(gateway_doc("standard"))
    assert "value it issues" in kids.routing.description
    (warning,) = [w for w in checks.warnings(tp) if w.path == "spec.routing.gateway.implementation"]
    assert "client-chosen sequence ID" in warning.message
    for other in (
        gateway_doc("envoy-gateway"),
        gateway_doc(),
        doc(routing={"sessionAffinity": "Header", "provider": "istio"}),
    ):
        assert not [w for w in checks.warnings(children(other)[0]) if w.path.startswith("spec.routing")]


def test_ingress_nginx_is_deprecated_with_a_pointer_to_the_migration():
    from tritonpipeline.render import checks

    tp, _ = children(
        doc(routing={"sessionAffinity": "Header", "provider": "ingress-nginx", "tlsSecretName": "t"})
    )
    (warning,) = [w for w in checks.warnings(tp) if w.path == "spec.routing.provider"]
    assert "deprecated" in warning.message and "docs/how-to/migrate-ingress-nginx.md" in warning.message
    assert (ROOT / "docs" / "how-to" / "migrate-ingress-nginx.md").is_file()


def test_gateway_api_needs_a_gateway():
    with pytest.raises(SpecError) as err:
        parse_pipeline(doc(routing={"sessionAffinity": "Header", "provider": "gateway-api"}))
    assert "spec.routing" in str(err.value) and "needs routing.gateway" in str(err.value)
    with pytest.raises(SpecError) as err:  # the default provider too
        parse_pipeline(doc(routing={"sessionAffinity": "Header"}))
    assert "(the default) needs routing.gateway" in str(err.value)


def test_headless_name_too_long_is_a_spec_error():
    d = doc(routing={"sessionAffinity": "Header", "provider": "istio"})
    d["metadata"]["name"] = "s" * 60
    d["spec"]["pipelines"][0]["name"] = "streaming"
    with pytest.raises(SpecError) as err:
        children(d)
    assert "shorten the pipeline name to 54" in str(err.value)


# ------------------------------------------------------------------------------ sequences without affinity


NO_AFFINITY = {"routing": {"sessionAffinity": "None"}}


ONE = {"server": {"replicas": 1}}


@pytest.mark.parametrize(
    ("spec", "breaks"),
    [
        (NO_AFFINITY, True),  # 2 replicas in the example
        ({**NO_AFFINITY, **ONE}, False),
        ({**NO_AFFINITY, **ONE, "autoscaling": {"maxReplicas": 3}}, True),
        ({**NO_AFFINITY, **ONE, "autoscaling": {"maxReplicas": 1}}, False),
        ({"routing": {"sessionAffinity": "Header", "provider": "istio"}}, False),
        ({"routing": {"sessionAffinity": "ClientIP"}}, False),
    ],
)
def test_sequence_model_on_several_replicas_without_affinity(spec, breaks):
    d = doc(**spec)
    if "server" in spec:
        d["spec"]["server"] = {**example("streaming")["spec"]["server"], **spec["server"]}
    problem = routing_objects.affinity_problem(parse_pipeline(d))
    assert (problem is not None) == breaks
    if breaks:
        assert "accumulator" in problem and "sessionAffinity" in problem


def test_stateless_pipeline_never_warns():
    d = doc("fanout")
    d["spec"]["server"]["replicas"] = 5
    assert routing_objects.affinity_problem(parse_pipeline(d)) is None


# --------------------------------------------------------------------------------------------- PromQL


def test_queries_exclude_every_ensemble_and_select_the_pipeline_pods():
    d = doc("fanout")
    tp = parse_pipeline(d)
    q = autoscaling_objects.pipeline_query(tp, "queueTime")
    assert q == (
        'sum(rate(nv_inference_queue_duration_us{namespace="ml",pod=~"vision-[a-z0-9]+-[a-z0-9]+",'
        'model!~"vision"}[1m])) / clamp_min(sum(rate(nv_inference_request_success{namespace="ml",'
        'pod=~"vision-[a-z0-9]+-[a-z0-9]+",model!~"vision"}[1m])), 1e-9)'
    )
    assert autoscaling_objects.pipeline_query(tp, "pendingRequests") == (
        'sum(nv_inference_pending_request_count{namespace="ml",pod=~"vision-[a-z0-9]+-[a-z0-9]+",'
        'model!~"vision"})'
    )
    assert autoscaling_objects.pipeline_query(tp, "gpuUtilization", namespace="x", window="5m") == (
        '100 * avg(nv_gpu_utilization{namespace="x",pod=~"vision-[a-z0-9]+-[a-z0-9]+"})'
    )
    with pytest.raises(ValueError):
        autoscaling_objects.expression("cpu", "")


def test_pipelines_with_several_ensembles_exclude_them_all():
    d = doc("fanout")
    second = copy.deepcopy(d["spec"]["pipelines"][0])
    second["name"] = "vision-b"
    d["spec"]["pipelines"].append(second)
    tp = parse_pipeline(d)
    assert 'model!~"vision|vision-b"' in autoscaling_objects.pipeline_query(tp, "pendingRequests")


def test_chart_adapter_rules_are_generated():
    assert ADAPTER_RULES.read_text() == autoscaling_objects.adapter_rules_yaml(), (
        "charts/triton-pipeline/files/prometheus-adapter-rules.yaml is stale: run `make generate`"
    )
    rules = yaml.safe_load(ADAPTER_RULES.read_text())["rules"]
    assert [r["name"]["as"] for r in rules] == list(autoscaling_objects.METRIC_NAMES.values())
    for r in rules:
        assert "<<.LabelMatchers>>" in r["metricsQuery"] and "<<.GroupBy>>" in r["metricsQuery"]


# --------------------------------------------------------------------------------------------- HPA / KEDA


@pytest.mark.parametrize("metric", autoscaling_objects.METRICS)
def test_hpa_pods_metric_per_metric(metric):
    _, kids = children(doc("fanout", autoscaling={"maxReplicas": 4, "metric": metric, "target": 20}))
    hpa = kids.hpa
    (m,) = hpa["spec"]["metrics"]
    assert m["type"] == "Pods"
    assert m["pods"]["metric"]["name"] == autoscaling_objects.METRIC_NAMES[metric]
    assert m["pods"]["target"] == {"type": "AverageValue", "averageValue": "20"}
    if metric in ("queueTime", "pendingRequests"):
        assert m["pods"]["metric"]["selector"] == {
            "matchExpressions": [{"key": "model", "operator": "NotIn", "values": ["vision"]}]
        }
    else:
        assert "selector" not in m["pods"]["metric"]
    assert "behavior" not in hpa["spec"]  # stateless: the HPA's defaults
    assert "replicas" not in kids.deployment["spec"]
    assert kids.scaled_object is None


def test_stateful_pipeline_scales_down_slowly_and_drains():
    d = doc(autoscaling={"maxReplicas": 4})
    d["spec"]["models"][1]["sequenceBatching"]["maxSequenceIdleMicroseconds"] = 600 * 1_000_000
    tp, kids = children(d)
    down = kids.hpa["spec"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] == 600 >= routing_objects.longest_idle_seconds(tp)
    assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 600}]
    pod = kids.deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["terminationGracePeriodSeconds"] >= 600 + autoscaling_objects.TRITON_EXIT_TIMEOUT_SECONDS
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[:2] == ["/bin/sh", "-c"] and f"touch {autoscaling_objects.DRAIN_FILE}" in pre_stop[2]
    assert "sleep 605" in pre_stop[2]
    readiness = c["readinessProbe"]["exec"]["command"]
    assert (
        f"test ! -e {autoscaling_objects.DRAIN_FILE}" in readiness[2] and "/v2/health/ready" in readiness[2]
    )
    assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert {"name": "run", "mountPath": autoscaling_objects.DRAIN_DIR} in c["volumeMounts"]


def test_short_idle_keeps_the_default_five_minutes():
    _, kids = children(doc(autoscaling={"maxReplicas": 4}))  # 5 s idle in the example
    assert kids.hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert kids.deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 5 + 5 + 30 + 10


@pytest.mark.parametrize("engine", ["hpa", "keda"])
def test_scale_down_window_of_a_stateless_pipeline_is_the_users(engine):
    auto = {"maxReplicas": 3, "engine": engine, "scaleDownStabilizationSeconds": 20}
    _, kids = children(doc("fanout", autoscaling=auto))
    if engine == "hpa":
        spec_behavior = kids.hpa["spec"]["behavior"]
    else:
        spec_behavior = kids.scaled_object["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert spec_behavior == {"scaleDown": {"stabilizationWindowSeconds": 20}}


@pytest.mark.parametrize(
    ("chosen", "idle_s", "window"), [(20, 5, 20), (0, 5, 5), (900, 600, 900), (20, 600, 600)]
)
def test_scale_down_window_of_a_stateful_pipeline_never_undercuts_the_idle_timeout(chosen, idle_s, window):
    d = doc(autoscaling={"maxReplicas": 4, "scaleDownStabilizationSeconds": chosen})
    d["spec"]["models"][1]["sequenceBatching"]["maxSequenceIdleMicroseconds"] = idle_s * 1_000_000
    _, kids = children(d)
    assert kids.hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == window


@pytest.mark.parametrize("bad", [-1, 3601, 1.5, "20"])
def test_scale_down_window_out_of_range_is_refused_with_its_field_path(bad):
    with pytest.raises(SpecError) as err:
        children(doc("fanout", autoscaling={"maxReplicas": 3, "scaleDownStabilizationSeconds": bad}))
    assert "spec.autoscaling.scaleDownStabilizationSeconds" in str(err.value)


def test_stateless_pipeline_keeps_the_plain_probe_and_waits_before_sigterm():
    _, kids = children(doc("fanout"))
    pod = kids.deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    # no drain file: a plain delay (tests/component/test_pod_spec.py checks the grace period against it)
    wait = ["sleep", str(autoscaling_objects.PRE_STOP_SECONDS)]  # an exec hook: the sleep action needs 1.30
    assert pod["containers"][0]["lifecycle"]["preStop"] == {"exec": {"command": wait}}


@pytest.mark.parametrize("metric", autoscaling_objects.METRICS)
def test_keda_scaled_object_with_the_generated_query(metric):
    d = doc(
        autoscaling={"maxReplicas": 5, "minReplicas": 2, "metric": metric, "engine": "keda", "target": 7.5}
    )
    tp, kids = children(d)
    assert kids.hpa is None
    so = kids.scaled_object
    assert (so["apiVersion"], so["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    spec = so["spec"]
    assert spec["scaleTargetRef"]["name"] == "streaming"
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 5)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metricType"] == ("AverageValue" if metric == "pendingRequests" else "Value")
    assert trigger["metadata"] == {
        "serverAddress": Settings().prometheus_address,
        "query": autoscaling_objects.pipeline_query(tp, metric),
        "threshold": "7.5",
    }
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"
    ] == 300  # fmt: skip
    d["spec"]["autoscaling"]["prometheusAddress"] = "http://prom.monitoring:9090"
    _, kids = children(d)
    assert (
        kids.scaled_object["spec"]["triggers"][0]["metadata"]["serverAddress"]
        == "http://prom.monitoring:9090"
    )


# --------------------------------------------------------------------------------------------- engine


def test_engine_auto_is_the_default_and_renders_the_hpa_where_no_cluster_is_asked():
    """`validate` and `manifests` ask no cluster: `auto` (the default) renders the HPA there; the operator
    swaps in the ScaledObject where it chooses KEDA (with_engine), the same one `keda` renders."""
    tp, kids = children(doc("fanout", autoscaling={"maxReplicas": 3}))
    assert tp.spec.autoscaling.engine == "auto"
    assert (
        autoscaling_objects.engine_of(tp) == "hpa" and autoscaling_objects.engine_of(tp, keda=True) == "keda"
    )
    assert kids.hpa is not None and kids.scaled_object is None
    keda = with_engine(kids, "keda")
    assert keda.hpa is None and keda.hpa not in keda.all()
    _, named = children(doc("fanout", autoscaling={"maxReplicas": 3, "engine": "keda"}))
    assert keda.scaled_object == named.scaled_object
    assert with_engine(kids, "hpa") is kids
    assert (
        autoscaling_objects.hpa_name(tp) == "vision"
        and autoscaling_objects.hpa_name(tp, "keda") == "keda-hpa-vision"
    )
    assert "KEDA ScaledObject vision" in autoscaling_objects.describe(tp, "keda")
    assert "HorizontalPodAutoscaler vision" in autoscaling_objects.describe(tp)


@pytest.mark.parametrize(
    ("engine", "served", "usable", "problems", "chosen", "why"),
    [
        ("auto", True, True, (), "keda", autoscaling_objects.AUTO_KEDA),
        ("auto", False, True, (), "hpa", autoscaling_objects.AUTO_HPA_NO_KEDA),
        ("auto", True, False, (), "hpa", autoscaling_objects.AUTO_HPA_KEDA_OFF),
        ("auto", True, True, ("spec.autoscaling: not reviewed",), "hpa", "spec.autoscaling: not reviewed"),
        # the spec's own choice wins, whatever the cluster serves
        ("hpa", True, True, (), "hpa", "autoscaling.engine hpa (set in the spec)"),
        ("keda", False, False, (), "keda", "autoscaling.engine keda (set in the spec)"),
    ],
)
def test_the_engine_chosen_and_why(engine, served, usable, problems, chosen, why):
    tp = parse_pipeline(doc("fanout", autoscaling={"maxReplicas": 3, "engine": engine}))
    choice = autoscaling_objects.choose(tp, served, usable, problems)
    assert choice.engine == chosen and why in choice.why
    if chosen == "hpa" and engine == "auto":
        assert "auto chose the HPA" in choice.why
    assert autoscaling_objects.choose(
        parse_pipeline(doc("fanout")), served
    ) == autoscaling_objects.EngineChoice(None)


def test_auto_without_the_operators_rbac_for_scaled_objects_chooses_the_hpa_and_names_the_verbs():
    """KEDA served and on, but the operator may not create ScaledObjects in the namespace: `auto` gets the
    HPA (not a ScaledObject the API server refuses, which left no autoscaler at all), and the reason names
    what is missing; `keda` named in the spec is still the spec's choice."""
    auto = parse_pipeline(doc("fanout", autoscaling={"maxReplicas": 3}))
    choice = autoscaling_objects.choose(auto, True, True, (), ("create",))
    assert choice.engine == "hpa"
    assert "RBAC does not let it create scaledobjects.keda.sh in this namespace" in choice.why
    both = autoscaling_objects.choose(auto, True, True, ("not reviewed",), ("create", "patch"))
    assert "create or patch scaledobjects.keda.sh" in both.why and "not reviewed" not in both.why
    asked = parse_pipeline(doc("fanout", autoscaling={"maxReplicas": 3, "engine": "keda"}))
    assert autoscaling_objects.choose(asked, True, True, (), ("create",)).engine == "keda"


# --------------------------------------------------------------------------------------------- client


def test_affinity_header_from_the_sequence_id():
    assert affinity_headers(None, DEFAULT_HEADER, 42) == {"x-triton-sequence-id": "42"}
    assert affinity_headers({"a": "b"}, "X-Stream", "abc") == {"a": "b", "x-stream": "abc"}
    # no sequence: a random key each time, never one empty key that pins every request to one replica
    keys = {affinity_headers(None, DEFAULT_HEADER, none)[DEFAULT_HEADER] for none in (0, "", None) * 20}
    assert len(keys) == 60 and all(len(k) == 16 for k in keys)
    assert affinity_headers({"a": "b"}, None, 7) == {"a": "b"}  # header disabled


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_client_inputs_and_protocols(protocol):
    client = TritonClient("127.0.0.1:1", protocol=protocol)
    t = client.input("CHUNK", np.array([[3]], dtype=np.int32))
    assert (t.name(), t.shape(), t.datatype()) == ("CHUNK", [1, 1], "INT32")
    assert client._arguments(9, None) == {"sequence_id": 9, "headers": {DEFAULT_HEADER: "9"}}
    client.close()
    with pytest.raises(ValueError):
        AsyncTritonClient("127.0.0.1:1", protocol="websocket")  # type: ignore[arg-type]


def test_missing_nginx_and_prometheus_reasons_are_exact(monkeypatch):
    """Tests that need nginx or prometheus skip with these words when the Debian packages are missing."""
    from harness import nginx, prometheus

    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr("os.access", lambda path, mode: False)
    assert nginx.missing_nginx() == (
        "nginx is not installed (no `nginx` on PATH or /usr/sbin/nginx): run `make system-deps` as root "
        "(Debian package nginx)"
    )
    assert prometheus.missing_prometheus() == (
        "prometheus is not installed (no `prometheus` on PATH or /usr/bin/prometheus): run "
        "`make system-deps` as root (Debian package prometheus)"
    )


# --------------------------------------------------------------------------------------------- Stream


def stream_doc(drain: int = 120) -> dict:
    d = doc(autoscaling={"maxReplicas": 4})
    d["spec"]["routing"] = {"sessionAffinity": "Stream", "streamDrainSeconds": drain}
    return d


def test_stream_routing_drains_open_streams_instead_of_a_fixed_idle_time():
    tp, kids = children(stream_doc(120))
    assert routing_objects.affinity_problem(tp) is None
    pod = kids.deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    script = c["lifecycle"]["preStop"]["exec"]["command"][2]
    assert f"touch {autoscaling_objects.DRAIN_FILE}; sleep {autoscaling_objects.PRE_STOP_SECONDS};" in script
    # while a stream the client helper registered is open (tests/component/test_stream_leases.py), not any
    # connection
    assert f"while [ $i -lt 120 ] && {autoscaling_objects.open_streams_test()};" in script
    assert autoscaling_objects.OPEN_STREAMS_PATH in script and "/proc/net/tcp" not in script
    assert "sleep 10;" in script and "sleep 15" not in script  # no fixed idle-timeout wait
    exit_timeout = autoscaling_objects.TRITON_EXIT_TIMEOUT_SECONDS
    assert (
        pod["terminationGracePeriodSeconds"] == autoscaling_objects.PRE_STOP_SECONDS + 120 + exit_timeout + 10
    )
    assert c["readinessProbe"]["exec"]["command"] == autoscaling_objects.Drain.readiness()  # no new streams
    r = routing_objects.routing_children(tp, Settings())
    assert r.objects == () and r.provider_objects == () and "gRPC stream" in r.description


@pytest.mark.parametrize("bad", [-1, 86401, "x"])
def test_stream_drain_out_of_range_is_refused_with_its_field_path(bad):
    with pytest.raises(SpecError) as err:
        children(stream_doc(bad))
    assert "spec.routing.streamDrainSeconds" in str(err.value)
