"""The fields the spec passes through to Kubernetes objects (spec/kubernetes.py): `validate` refuses a
value exactly when the real apiserver refuses the object it lands in. Each value is put into the
Deployment or NetworkPolicy a valid pipeline renders, at the place the renderer puts it, and applied
with dryRun=All; the same value in the spec goes through parse_pipeline."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from harness.kubeapi import dry_run_apply
from helpers import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.kube.api_client import KubeError
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import kubernetes as k8s
from tritonpipeline.spec import parse_pipeline

Obj = dict[str, Any]


def _pod(objects: dict[str, Obj]) -> Obj:
    return objects["Deployment"]["spec"]["template"]["spec"]


def _triton(objects: dict[str, Obj]) -> Obj:
    (container,) = [c for c in _pod(objects)["containers"] if c["name"] == "tritonserver"]
    return container


# spec field -> (where the renderer puts it, (value, refused by Kubernetes) ...)
CASES: dict[str, tuple[Callable[[dict[str, Obj], Any], None], list[tuple[Any, bool]]]] = {
    "server.resources": (
        lambda o, v: _triton(o).__setitem__("resources", v),
        [
            ({"requests": {"cpu": "500m", "memory": "1.5Gi"}, "limits": {"memory": "2Gi"}}, False),
            ({"requests": {"cpu": "1e3", "ephemeral-storage": 2}}, False),
            ({"requests": {"cpu": "lots"}}, True),
            ({"requests": {"memory": "2GB"}}, True),
            ({"limits": {"memory": "-1Gi"}}, True),
            ({"limits": {"cpu": -1}}, True),
            ({"requets": {"cpu": "1"}}, True),
            ({"requests": "1"}, True),
        ],
    ),
    "server.strategy": (
        lambda o, v: o["Deployment"]["spec"].__setitem__("strategy", v),
        [
            ({"type": "Recreate"}, False),
            ({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}, False),
            ({"type": "Teleport"}, True),
            ({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}, True),
            ({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}, True),
            ({"rollingUpdate": {"maxSurge": "lots"}}, True),
        ],
    ),
    "server.tolerations": (
        lambda o, v: _pod(o).__setitem__("tolerations", v),
        [
            ([{"operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoSchedule"}], False),
            ([{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}], False),
            ([{"operator": "Sometimes"}], True),
            ([{"key": "a", "operator": "Exists", "value": "b"}], True),
            ([{"value": "b"}], True),
            ([{"key": "a", "effect": "Sometimes"}], True),
            ([{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}], True),
        ],
    ),
    "server.affinity": (
        lambda o, v: _pod(o).__setitem__("affinity", v),
        [
            ({"podAffinity": {}}, False),
            ({"nodeAffinity": "yes"}, True),
            ({"nodeAfinity": {}}, True),
        ],
    ),
    "server.podSecurityContext": (
        lambda o, v: _pod(o)["securityContext"].update(v),
        [
            ({"fsGroup": 2000, "supplementalGroups": [3000]}, False),
            ({"fsGroup": -5}, True),
            ({"runAsUser": 2147483648}, True),
            ({"supplementalGroups": [1, -1]}, True),
        ],
    ),
    "networkPolicy.inference": (
        lambda o, v: o["NetworkPolicy"]["spec"]["ingress"][0].__setitem__("from", v),
        [
            ([{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"podSelector": {}}], False),
            ([{"ipBlock": {"cidr": "not-a-cidr"}}], True),
            ([{"ipBlock": {"cidr": "10.0.0.1"}}], True),
            ([{"podSelector": "x"}], True),
        ],
    ),
}
TABLE = [(field, value, refused) for field, (_, values) in CASES.items() for value, refused in values]


def _doc(namespace: str) -> Obj:
    doc = example("fanout", uri="pvc://models/triton")
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["networkPolicy"] = {"inference": [{"podSelector": {}}]}
    return doc


def _in_spec(doc: Obj, field: str, value: Any) -> Obj:
    out = copy.deepcopy(doc)
    *parents, last = field.split(".")
    target = out["spec"]
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value
    return out


@pytest.mark.parametrize(
    ("field", "value", "refused"), TABLE, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(TABLE)]
)
def test_validate_refuses_what_kubernetes_refuses(field: str, value: Any, refused: bool) -> None:
    """The spec's verdict, at the field's path (pure: the apiserver's is below)."""
    doc = _in_spec(_doc("default"), field, value)
    if not refused:
        parse_pipeline(doc)
        return
    with pytest.raises(SpecError) as info:
        parse_pipeline(doc)
    assert all(p.path.startswith(f"spec.{field}") for p in info.value.problems), info.value.problems


@pytest.mark.apiserver
def test_the_apiserver_refuses_the_same_values(kube: Any, namespace: str) -> None:
    """Each value of the table in the object it lands in, through the real apiserver (dryRun=All)."""
    tp = parse_pipeline(_doc(namespace))
    children = render_children(tp, compile_pipeline(tp), Settings())
    rendered = {o["kind"]: o for o in children.all() if o["kind"] in ("Deployment", "NetworkPolicy")}
    assert sorted(rendered) == ["Deployment", "NetworkPolicy"]
    disagree = []
    for field, value, refused in TABLE:
        objects = copy.deepcopy(rendered)
        CASES[field][0](objects, value)
        kind = "NetworkPolicy" if field.startswith("networkPolicy") else "Deployment"
        try:
            dry_run_apply(kube, objects[kind])
            said = False
        except KubeError as exc:
            assert exc.status in (400, 422, 500), exc  # 500: an object it cannot convert or type
            said = True
        if said != refused:
            disagree.append((field, value, said))
    assert disagree == []


def test_a_quantity_is_what_apimachinery_parses() -> None:
    """K8S_QUANTITY_RE against quantities written as Kubernetes' own docs and manifests write them."""
    for text in ("1", "0.5", ".5", "500m", "1.5Gi", "4G", "1e3", "2E-3", "100n", "10u", "1k", "+1"):
        assert k8s.K8S_QUANTITY_RE.fullmatch(text), text
    for text in ("lots", "2GB", "1.5gi", "1 Gi", "Gi", "1e", "0x10", ""):
        assert not k8s.K8S_QUANTITY_RE.fullmatch(text), text


# (reference, whether the runtimes parse it): each checked against the distribution project's
# reference.ParseDockerRef (v0.6.0, with crypto/sha256 and sha512 linked in, as containerd has them),
# which the kubelet and containerd parse an image with
IMAGES = [
    ("nvcr.io/nvidia/tritonserver:26.08-py3", True),
    ("tritonserver", True),
    ("localhost:5000/a/b:1", True),
    ("[::1]:5000/x", True),
    ("127.0.0.1:5000/img:latest", True),
    ("my-registry:5000/img", True),
    ("Nvcr.io/nvidia/triton:1", True),  # an upper-case host
    ("a__b/c--d/e.f_g:_tag", True),
    ("nvcr.io/nvidia/tritonserver:26.08-py3@sha256:" + "0" * 64, True),
    ("x@sha384:" + "a" * 96, True),
    ("a" * 247, True),  # library/ + 247: the 255 the path may have
    ("a" * 248, False),
    ("r.io/" + "a" * 255, True),
    ("r.io/" + "a" * 256, False),
    ("x:" + "a" * 128, True),
    ("x:" + "a" * 129, False),
    ("Nvcr.io/nvidia/Triton:1", False),
    ("ghcr.io/Org/img", False),
    ("UPPER", False),
    ("nvcr.io/nvidia/tritonserver:", False),
    ("a b", False),
    ("nvcr.io//x", False),
    ("x:tag:tag", False),
    ("a___b", False),
    ("a-/b", False),
    ("-x", False),
    ("my_registry:5000/img", False),
    ("sub.-bad.io/x", False),
    ("ghcr.io/org/img:v1.0.0-rc.1+build", False),
    ("ghcr.io/org/img:.v1", False),
    ("registry.example.com/ml/tritonpipeline@sha256:abc", False),
    ("x@md5:0123456789abcdef0123456789abcdef", False),
    ("x@sha256:" + "A" * 64, False),
    ("x@sha256:" + "a" * 63, False),
    ("[fe80::1%eth0]:5000/img", False),
]


@pytest.mark.parametrize(("image", "parses"), IMAGES, ids=[f"image-{i}" for i in range(len(IMAGES))])
def test_an_image_is_what_the_runtimes_parse(image: str, parses: bool) -> None:
    """spec.server.image: the apiserver takes any string, and the kubelet reported InvalidImageName only
    when the pod started; `validate`, the webhook and the operator now refuse it at the field."""
    doc = _in_spec(_doc("default"), "server.image", image)
    if parses:
        assert parse_pipeline(doc).spec.server.image == image
        return
    with pytest.raises(SpecError) as info:
        parse_pipeline(doc)
    ((path, message),) = [(p.path, p.message) for p in info.value.problems]
    assert path == "spec.server.image" and "invalid image reference" in message
