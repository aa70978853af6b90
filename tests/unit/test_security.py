"""Issue 16: administrative APIs behind a key (real tritonserver), image currency, the NetworkPolicy and
the admin-key wiring of the rendered objects.
Here the pure tests; those on real components are in tests/component/test_security.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from helpers import ROOT, example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.render import checks
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import DEFAULT_IMAGE, parse_pipeline
from tritonpipeline.triton import advisories, security


def cluster(source: str = "diamond", **spec: Any) -> dict[str, Any]:
    doc = example(source)
    doc["metadata"] = {"name": "vision", "namespace": "team-a"}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"].update(spec)
    return doc


def render(doc: dict[str, Any], settings: Settings | None = None) -> Any:
    tp = parse_pipeline(doc)
    return render_children(tp, compile_pipeline(tp), settings or Settings())


# --- rendered objects (pure) ---------------------------------------------------------------------------


def triton_container(children: Any) -> dict[str, Any]:
    return children.deployment["spec"]["template"]["spec"]["containers"][0]


def test_deployment_restricts_the_admin_apis_with_the_key_from_the_secret():
    c = triton_container(render(cluster()))
    options = ("--http-restricted-api", "--grpc-restricted-protocol")
    restricted = [a for a in c["args"] if a.startswith(options)]
    groups = "logging,trace,shared-memory,model-repository,model-config,statistics"
    assert restricted == [
        f"--http-restricted-api={groups}:admin-key=$(TRITON_ADMIN_KEY)",
        f"--grpc-restricted-protocol={groups}:admin-key=$(TRITON_ADMIN_KEY)",
    ]
    assert not {"inference", "health", "metadata"} & set(groups.split(","))
    assert c["env"] == [
        {"name": "TRITON_ADMIN_KEY",
         "valueFrom": {"secretKeyRef": {"name": "vision-admin-key", "key": "admin-key"}}},
    ]  # fmt: skip


def test_a_named_secret_replaces_the_generated_one():
    doc = cluster()
    doc["spec"]["server"] = {"adminKeySecretRef": {"name": "platform-keys", "key": "triton"}}
    ref = triton_container(render(doc))["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "platform-keys", "key": "triton"}
    doc["spec"]["server"] = {"adminKeySecretRef": {"name": "Bad_Name"}}
    with pytest.raises(SpecError) as err:
        parse_pipeline(doc)
    assert "spec.server.adminKeySecretRef.name" in str(err.value)


@pytest.mark.parametrize(
    "arg",
    ["--http-restricted-api=logging:k=v", "--grpc-restricted-protocol=trace:k=v", "--http-restr=logging:k=v"],
)
def test_server_args_cannot_lift_the_restriction(arg):
    doc = cluster()
    doc["spec"]["server"] = {"args": [arg]}
    with pytest.raises(SpecError) as err:
        parse_pipeline(doc)
    text = str(err.value)
    assert "spec.server.args[0]" in text and "cannot be given in server.args" in text


def test_the_secret_is_no_applied_child_and_carries_its_key_only_in_the_secret():
    from tritonpipeline.render.access import admin_secret

    doc = cluster()
    children = render(doc)
    assert not [o for o in children.all() if o["kind"] == "Secret"]
    key = security.new_key()
    secret = admin_secret(parse_pipeline(doc), key, Settings())
    assert secret["stringData"] == {"admin-key": key}
    assert key not in json.dumps([*children.all(), children.scaled_object])


def test_restricted_args_are_valid_tritonserver_options():
    from tritonpipeline.triton import tritonserver_options as opts

    flags, problems = opts.parse(security.restricted_args(security.new_key()))
    assert not problems and [f.option for f in flags] == ["http-restricted-api", "grpc-restricted-protocol"]


# --- image currency ------------------------------------------------------------------------------------


# NVIDIA's Triton bulletins from 2024 on and the release each names as fixed, as read from NVIDIA's
# bulletins (NVIDIA/product-security, <year>/<id>/<id>.md), written here apart from advisories.py
FIXED_IN = {5535: "24.04", 5546: "24.05", 5565: "24.09", 5612: "24.12", 5687: "25.07", 5691: "25.08",
            5723: "25.09", 5734: "25.10", 5790: "26.01", 5816: "26.02", 5828: "26.03", 5848: "26.04",
            5853: "26.05", 5860: "26.03", 5865: "26.06", 5875: "26.07"}  # fmt: skip


def image_warning(image: str) -> str | None:
    doc = cluster()
    doc["spec"]["server"] = {"image": image}
    found = [w for w in checks.warnings(parse_pipeline(doc)) if w.path == "spec.server.image"]
    assert len(found) <= 1
    return found[0].message if found else None


def named_bulletins(message: str) -> set[int]:
    return {int(b) for b in re.findall(r"\b(5\d{3}) \(fixed in", message)}


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("nvcr.io/nvidia/tritonserver:24.03-py3", "24.03"),
        ("nvcr.io/nvidia/tritonserver:24.04-py3", "24.04"),
        ("nvcr.io/nvidia/tritonserver:24.10-py3@sha256:" + "b" * 64, "24.10"),
        ("registry.local/mirror/tritonserver:25.07-py3-sdk", "25.07"),
        ("tritonserver:26.03", "26.03"),
        ("tritonserver:26.05", "26.05"),
        ("nvcr.io/nvidia/tritonserver:26.06-trtllm-python-py3", "26.06"),
    ],
)
def test_validate_warns_naming_each_bulletin_whose_fix_the_release_predates(image, release):
    message = image_warning(image)
    assert message is not None
    assert named_bulletins(message) == {b for b, fixed in FIXED_IN.items() if release < fixed}
    assert "older than 26.07" in message and repr(image) in message


@pytest.mark.parametrize(
    "image",
    [DEFAULT_IMAGE, "nvcr.io/nvidia/tritonserver:26.07-py3", "tritonserver:27.01-py3",
     "my.registry/triton-custom:1.0", "nvcr.io/nvidia/tritonserver@sha256:" + "a" * 64,
     "nvcr.io/nvidia/tritonserver:latest"],
)  # fmt: skip
def test_no_warning_for_a_current_or_undatable_image(image):
    assert image_warning(image) is None


def test_the_table_holds_every_bulletin_with_nvidias_fixed_release():
    assert {a.bulletin: advisories.label(a.fixed_in) for a in advisories.ADVISORIES} == FIXED_IN
    for a in advisories.ADVISORIES:  # NVIDIA publishes a bulletin once its fix is released
        assert advisories.label(a.fixed_in) <= a.published[2:7].replace("-", "."), a.bulletin
        assert a.cves and all(re.fullmatch(r"CVE-\d{4}-\d{4,}", c) for c in a.cves), a.bulletin


def test_the_default_image_carries_every_known_fix():
    found = advisories.release(DEFAULT_IMAGE)
    assert found is not None and all(found >= a.fixed_in for a in advisories.ADVISORIES)


def test_the_security_page_names_each_bulletin_its_cves_and_its_fixed_release():
    section = (ROOT / "docs" / "concepts" / "security.md").read_text()
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d{4}) \|.*$", section, re.M)}
    assert set(rows) == set(FIXED_IN)
    for a in advisories.ADVISORIES:
        assert rows[a.bulletin].endswith(f"| {FIXED_IN[a.bulletin]} |"), rows[a.bulletin]
        assert all(cve in rows[a.bulletin] for cve in a.cves), a.bulletin


# --- NetworkPolicy --------------------------------------------------------------------------------------


def test_no_network_policy_unless_asked():
    assert render(cluster()).network_policy is None


def test_the_admin_closes_every_pipeline_by_default():
    """Issue 54: spec.networkPolicy was opt-in, so any pod could reach inference, metadata and metrics.
    With the default policy on (the chart's default) a pipeline without one admits only the pods of its
    namespace, the routing tier's namespaces (inference) and Prometheus's and the operator's (metrics);
    a spec's own policy still wins, and a field it leaves out gets the same namespaces."""
    import dataclasses

    settings = dataclasses.replace(
        Settings(),
        default_network_policy=True,
        routing_namespaces=("ingress-nginx",),
        metrics_namespaces=("monitoring",),
        operator_namespace="triton-system",
        operator_labels=(("app", "op"),),
    )
    policy = render(cluster(), settings).network_policy
    assert policy is not None and policy["spec"]["policyTypes"] == ["Ingress"]

    def namespace(ns: str) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}

    operator = {**namespace("triton-system"), "podSelector": {"matchLabels": {"app": "op"}}}
    tcp = [{"protocol": "TCP", "port": p} for p in (8000, 8001, 8002)]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}, namespace("ingress-nginx")], "ports": tcp[:2]},
        {"from": [{"podSelector": {}}, namespace("monitoring"), operator], "ports": tcp[2:]},
    ]
    closed = render(cluster(networkPolicy={"inference": []}), settings).network_policy
    assert closed is not None
    assert closed["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}, namespace("monitoring"), operator], "ports": tcp[2:]}
    ]


def test_network_policy_defaults_to_the_namespace_and_an_empty_list_closes_a_port():
    policy = render(cluster(networkPolicy={})).network_policy
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "vision"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    tcp = [{"protocol": "TCP", "port": p} for p in (8000, 8001, 8002)]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": tcp[:2]},
        {"from": [{"podSelector": {}}], "ports": tcp[2:]},
    ]
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    policy = render(cluster(networkPolicy={"inference": [], "metrics": [prom]})).network_policy
    assert policy["spec"]["ingress"] == [{"from": [prom], "ports": [{"protocol": "TCP", "port": 8002}]}]
