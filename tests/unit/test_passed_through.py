"""The fields the spec passes through to Kubernetes objects (spec/kubernetes.py): `validate` refuses a
value exactly when the real apiserver refuses the object it lands in. Each value is put into the
Deployment or NetworkPolicy a valid pipeline renders, at the place the renderer puts it, and applied
with dryRun=All; the same value in the spec goes through parse_pipeline.
Here the pure tests; those on real components are in tests/component/test_passed_through.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from support.passed_through import TABLE, Obj, _doc
from tritonpipeline.errors import SpecError
from tritonpipeline.spec import kubernetes as k8s
from tritonpipeline.spec import parse_pipeline


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
