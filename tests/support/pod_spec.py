"""What tests/unit/test_pod_spec.py and tests/component/test_pod_spec.py share."""

from __future__ import annotations

from typing import Any

from helpers import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline


def cluster_doc(**server: Any) -> dict[str, Any]:
    doc = example("fanout")
    doc["metadata"] = {"name": "vision", "namespace": "ml"}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"]["server"] = {**doc["spec"].get("server", {}), **server}
    return doc


def pod_spec(doc: dict[str, Any], settings: Settings | None = None) -> dict[str, Any]:
    tp = parse_pipeline(doc)
    children = render_children(tp, compile_pipeline(tp), settings or Settings())
    return children.deployment["spec"]["template"]["spec"]
