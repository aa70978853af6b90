"""The fields the spec passes through to Kubernetes objects (spec/kubernetes.py): `validate` refuses a
value exactly when the real apiserver refuses the object it lands in. Each value is put into the
Deployment or NetworkPolicy a valid pipeline renders, at the place the renderer puts it, and applied
with dryRun=All; the same value in the spec goes through parse_pipeline.
Here the tests on real components; the pure ones are in tests/unit/test_passed_through.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness.kubeapi import dry_run_apply
from support.passed_through import CASES, TABLE, _doc
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.kube.api_client import KubeError
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline


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
