"""What a pipeline reaches on its author's behalf, and the signed record of who may (render/reach.py; issue
54's point 2). Pure: the items of rendered pipelines, the admin lists, the record's signature."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from helpers import example
from tritonpipeline.reconcile.pipeline import compile_cr
from tritonpipeline.render import reach as rc
from tritonpipeline.settings import Settings

KEY = b"k" * 32


def doc(**spec: Any) -> dict[str, Any]:
    d = example("fanout", uri="pvc://models/triton")
    d["metadata"] = {"name": "p", "namespace": "team-a"}
    d["spec"].update(spec)
    return d


def items(d: dict[str, Any], settings: Settings | None = None) -> dict[str, rc.Reach]:
    """The items not on an admin list, by key."""
    settings = settings or Settings()
    tp, _, children, _ = compile_cr(d, settings)
    return {i.key: i for i in rc.reach(tp, children, settings, d["spec"]) if not i.listed}


INGRESS = {
    "sessionAffinity": "Header",
    "provider": "ingress-nginx",
    "host": "login.bank.example",
    "tlsSecretName": "bank-tls",
    "ingressClassName": "nginx",
}


def test_an_ingress_for_another_teams_host_is_reached_with_its_fields() -> None:
    """Issue 54: the tenant got an Ingress for login.bank.example with their TLS Secret."""
    found = items(doc(routing=INGRESS))
    fields = {key: i.field for key, i in found.items()}
    assert fields == {
        "get persistentvolumeclaims team-a/models": "spec.modelRepository.uri",
        "create ingresses.networking.k8s.io team-a": "spec.routing",
        "create ingresses.networking.k8s.io team-a host login.bank.example": "spec.routing.host",
        "create ingresses.networking.k8s.io team-a ingress class nginx": "spec.routing.ingressClassName",
        "get secrets team-a/bank-tls": "spec.routing.tlsSecretName",
    }


def test_a_keda_trigger_at_any_address_is_reached() -> None:
    """Issue 54: a ScaledObject whose serverAddress is any URL the tenant wrote (a server-side request
    forgery from KEDA's network position)."""
    autoscaling = {"maxReplicas": 3, "engine": "keda", "prometheusAddress": "http://127.0.0.1:10250"}
    found = items(doc(autoscaling=autoscaling))
    assert found["create scaledobjects.keda.sh team-a"].field == "spec.autoscaling"
    address = found["create scaledobjects.keda.sh team-a metrics address http://127.0.0.1:10250"]
    assert address.field == "spec.autoscaling.prometheusAddress"
    assert address.attributes() == {
        "namespace": "team-a",
        "verb": "create",
        "group": "keda.sh",
        "resource": "scaledobjects",
    }


def test_an_auto_engine_reaches_a_scaled_object_only_as_optional_items() -> None:
    """The default engine `auto` renders the HPA (a trusted kind) and may get a ScaledObject instead
    where KEDA is served: its items are optional (reviewed at admission, recorded when allowed, never
    refused); the address the tenant wrote is one of them unless an admin lists it, and none when the
    operator's own address is used."""
    settings = Settings()
    d = doc(autoscaling={"maxReplicas": 3, "prometheusAddress": "http://127.0.0.1:10250"})
    tp, _, children, _ = compile_cr(d, settings)
    required = rc.reach(tp, children, settings, d["spec"])
    assert "create horizontalpodautoscalers.autoscaling team-a" in {i.key for i in required}
    assert not any(i.resource == "scaledobjects" for i in required)
    optional = {i.key: i for i in rc.optional_reach(tp, settings, d["spec"], required)}
    assert set(optional) == {
        "create scaledobjects.keda.sh team-a",
        "create scaledobjects.keda.sh team-a metrics address http://127.0.0.1:10250",
    }
    assert all(i.optional and not i.listed for i in optional.values())
    # trusted kind and a listed address (issue 54's admin lists): nothing left to review
    listed = dataclasses.replace(
        settings,
        trusted_kinds=(*settings.trusted_kinds, "ScaledObject"),
        allowed_metrics_addresses=("team-a/http://127.0.0.1:*",),
    )
    assert all(i.listed for i in rc.optional_reach(tp, listed, d["spec"], required))
    # the operator's own address: the kind alone
    plain = doc(autoscaling={"maxReplicas": 3})
    tp, _, children, _ = compile_cr(plain, settings)
    keys = [
        i.key for i in rc.optional_reach(tp, settings, plain["spec"], rc.reach(tp, children, settings, {}))
    ]
    assert keys == ["create scaledobjects.keda.sh team-a"]
    # engines named in the spec have nothing optional
    for engine in ("hpa", "keda"):
        named = doc(autoscaling={"maxReplicas": 3, "engine": engine})
        tp, _, children, _ = compile_cr(named, settings)
        assert rc.optional_reach(tp, settings, named["spec"], rc.reach(tp, children, settings, {})) == []


def test_every_secret_and_claim_the_pods_are_given_is_reached_at_its_field() -> None:
    """Any Secret or PVC of the namespace went into the Triton container on request."""
    server = example("fanout")["spec"].get("server", {})
    server = {
        **server,
        "imagePullSecrets": [{"name": "regcred"}],
        "adminKeySecretRef": {"name": "ak", "key": "k"},
    }
    repository = {"uri": "s3://bucket/models", "secretRef": {"name": "s3c"}}
    found = items(doc(server=server, modelRepository=repository))
    secrets = {i.name: i.field for i in found.values() if i.resource == "secrets"}
    assert secrets == {
        "ak": "spec.server.adminKeySecretRef.name",
        "regcred": "spec.server.imagePullSecrets[0].name",
        "s3c": "spec.modelRepository.secretRef.name",
    }
    assert all(i.verb == "get" for i in found.values() if i.resource == "secrets")


def test_what_the_operator_names_itself_is_not_the_authors() -> None:
    """The generated repository's ConfigMaps and admin-key Secret are the operator's own: not reviewed."""
    found = items(doc())
    assert list(found) == ["get persistentvolumeclaims team-a/models"]


def test_another_namespaces_gateway_is_reached_unless_shared() -> None:
    gateway = {"name": "g", "namespace": "infra", "implementation": "envoy-gateway"}
    routing = {"sessionAffinity": "Header", "provider": "gateway-api", "gateway": gateway}
    found = items(doc(routing=routing))
    assert found["get gateways.gateway.networking.k8s.io infra/g"].field == "spec.routing.gateway.namespace"
    assert "create httproutes.gateway.networking.k8s.io team-a" in found
    shared = dataclasses.replace(Settings(), shared_gateway_namespaces=("infra",))
    assert "get gateways.gateway.networking.k8s.io infra/g" not in items(doc(routing=routing), shared)


def test_admin_lists_allow_kinds_hosts_and_classes_per_namespace() -> None:
    settings = dataclasses.replace(
        Settings(),
        trusted_kinds=(*Settings().trusted_kinds, "Ingress"),
        allowed_hosts=("team-a/*.bank.example",),
        allowed_ingress_classes=("nginx",),
    )
    assert [k for k in items(doc(routing=INGRESS), settings) if "ingresses" in k] == []
    other = doc(routing=INGRESS)
    other["metadata"]["namespace"] = "team-b"
    left = [k for k in items(other, settings) if "ingresses" in k]
    assert left == ["create ingresses.networking.k8s.io team-b host login.bank.example"]


@pytest.mark.parametrize(
    ("entry", "namespace", "value", "allowed"),
    [
        ("*.a.example", "x", "m.a.example", True),
        ("*.a.example", "x", "a.example", False),
        ("team-a/*.a.example", "team-a", "m.a.example", True),
        ("team-a/*.a.example", "team-b", "m.a.example", False),
        ("http://prometheus.monitoring.svc:9090", "x", "http://prometheus.monitoring.svc:9090", True),
        ("team-a/http://prom.team-a.svc:*", "team-a", "http://prom.team-a.svc:9090", True),
        ("team-a/http://prom.team-a.svc:*", "team-b", "http://prom.team-a.svc:9090", False),
    ],
)
def test_list_entries_are_patterns_optionally_bound_to_a_namespace(
    entry: str, namespace: str, value: str, allowed: bool
) -> None:
    assert rc.listed([entry], namespace, value) is allowed


def test_a_record_holds_only_for_the_pipeline_it_was_signed_for() -> None:
    keys = ["get secrets team-a/s3c", "create ingresses.networking.k8s.io team-a"]
    text = rc.record(KEY, "team-a", "p", "alice", keys)
    assert rc.recorded(KEY, "team-a", "p", text) == frozenset(keys)
    assert rc.recorded(KEY, "team-a", "q", text) == frozenset()  # copied onto another pipeline
    assert rc.recorded(KEY, "team-b", "p", text) == frozenset()
    assert rc.recorded(b"x" * 32, "team-a", "p", text) == frozenset()  # another operator's key
    forged = text.replace("team-a/s3c", "team-a/admin-creds")
    assert rc.recorded(KEY, "team-a", "p", forged) == frozenset()
    assert rc.recorded(KEY, "team-a", "p", "not json") == frozenset()
    assert rc.recorded(KEY, "team-a", "p", None) == frozenset()


def test_unreviewed_items_are_refused_at_their_fields() -> None:
    found = items(doc(routing=INGRESS))
    recorded = frozenset({"get persistentvolumeclaims team-a/models"})
    problems = rc.unreviewed(list(found.values()), recorded)
    assert {p.path for p in problems} == {
        "spec.routing",
        "spec.routing.host",
        "spec.routing.ingressClassName",
        "spec.routing.tlsSecretName",
    }
    host = next(p for p in problems if p.path == "spec.routing.host")
    assert "create ingresses.networking.k8s.io in namespace team-a (host login.bank.example)" in host.message
    assert rc.RECORD_ANNOTATION in host.message and "security.allowedHosts" in host.message
    tls = next(p for p in problems if p.path == "spec.routing.tlsSecretName")
    assert "get secrets bank-tls in namespace team-a" in tls.message and rc.NOT_LISTABLE in tls.message


def test_without_the_webhook_only_the_admin_lists_allow() -> None:
    """With the review on and no webhook nobody was asked: each item no list allows is refused at its
    field, saying why."""
    found = items(doc(routing=INGRESS))
    problems = rc.unreviewed(list(found.values()), frozenset(), webhook=False)
    assert {p.path for p in problems} == {i.field for i in found.values()}
    assert all(p.message.startswith("not reviewed: the admission webhook is off") for p in problems)


def test_a_reference_is_found_at_the_first_field_holding_it() -> None:
    """One walk finds each text where a depth-first reading of the spec first meets it, and a claim at
    the first pvc:// URL naming it (with or without a path after it)."""
    spec = {
        "a": [{"x": "other"}, {"y": "pvc://claim-1/models/x"}, "shared"],
        "b": {"c": "shared", "d": "pvc://claim-2", "e": 7, "f": None},
        "g": "claim-1",
    }
    found = rc.locations(spec)
    assert found["shared"] == "spec.a[2]"
    assert found["claim-1"] == "spec.a[1].y"
    assert found["claim-1/models"] == "spec.a[1].y"
    assert found["claim-2"] == "spec.b.d"
    assert found["other"] == "spec.a[0].x"
    assert "7" not in found and "models" not in found
