"""`validate` agrees with the operator and with the API server: every name the renderers derive is
checked in one place (render/checks.py) that both use, the limits are the API server's own (checked
against a real kube-apiserver), and warnings (allowed but probably wrong) are printed and returned as
data without failing validation.
Here the tests on real components; the pure ones are in tests/unit/test_cluster_rules.py."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import example
from support.cluster_rules import PVC, _header
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.render import autoscaling_objects, checks, routing_objects
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline


def _hpa(doc: dict[str, Any], pipeline: str, metric: str = "queueTime") -> None:
    doc["spec"]["pipelines"][0]["name"] = pipeline
    doc["spec"]["autoscaling"] = {"maxReplicas": 3, "metric": metric}


# --------------------------------------------------------------------------- against the API server


def _applies(kube: Kube, obj: dict[str, Any]) -> bool:
    try:
        kube.apply(obj)
    except KubeError as exc:
        assert exc.status == 422, str(exc)
        return False
    return True


@pytest.mark.apiserver
@pytest.mark.parametrize("length", [54, 55])
def test_headless_service_limit_is_the_api_servers(kube: Kube, namespace: str, length: int) -> None:
    doc = example("streaming", PVC)
    _header(doc, "s" * length)
    doc["metadata"]["namespace"] = namespace
    tp = parse_pipeline(doc)
    ours = not checks.name_problems(tp)
    meta = routing_objects.routing_metadata(tp, Settings())
    service = routing_objects.headless_service(tp, meta)
    ingresses = routing_objects.ingresses(tp, meta)
    assert ours == (length == 54)
    assert _applies(kube, service) == ours
    # <name>-http/-grpc fit either way, but their backend is the headless Service
    assert all(_applies(kube, i) == ours for i in ingresses)


@pytest.mark.apiserver
@pytest.mark.parametrize("pipeline", ["vision", "_vision", "vision-", "v" * 64])
def test_hpa_selector_values_are_not_limited_by_the_api_server(
    kube: Kube, namespace: str, pipeline: str
) -> None:
    """The HPA's metric selector lists the ensembles (`model NotIn [...]`); the API server takes any
    value there, so pipeline names that are no label values must not be refused either."""
    doc = example("fanout", PVC)
    _hpa(doc, pipeline)
    doc["metadata"]["namespace"] = namespace
    tp = parse_pipeline(doc)
    ours = not checks.name_problems(tp)
    hpa = autoscaling_objects.hpa(tp, Settings())
    assert hpa is not None
    assert ours and _applies(kube, hpa)
