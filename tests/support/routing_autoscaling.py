"""What tests/unit/test_routing_autoscaling.py and tests/component/test_routing_autoscaling.py share."""

from __future__ import annotations

import copy
from typing import Any

from helpers import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline


def doc(source: str = "streaming", **spec: Any) -> dict[str, Any]:
    d = example(source)
    d["metadata"]["namespace"] = "ml"
    d["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    d["spec"].update(copy.deepcopy(spec))
    return d


def children(d: dict[str, Any], settings: Settings | None = None):
    tp = parse_pipeline(d)
    return tp, render_children(tp, compile_pipeline(tp), settings or Settings())
