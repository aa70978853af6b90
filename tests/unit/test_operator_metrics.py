"""The operator's own metrics that need no API server (runtime/metrics.py)."""

from __future__ import annotations

import kopf
import pytest
from prometheus_client.core import REGISTRY

from tritonpipeline.runtime import metrics

NAME = f"{metrics.PREFIX}_admission_duration_seconds"


def answered(webhook: str, namespace: str) -> float:
    labels = {"webhook": webhook, "namespace": namespace}
    return REGISTRY.get_sample_value(f"{NAME}_count", labels) or 0.0


def test_an_admission_answer_is_timed_per_webhook_and_namespace_refusals_included() -> None:
    doc = {"metadata": {"namespace": "team-b", "name": "p"}}
    before = answered("validate", "team-b"), answered("review", "team-b"), answered("validate", "team-a")
    with metrics.answering("validate", doc):
        pass
    with pytest.raises(kopf.AdmissionError), metrics.answering("review", doc):
        raise kopf.AdmissionError("refused", code=403)
    after = answered("validate", "team-b"), answered("review", "team-b"), answered("validate", "team-a")
    assert [b - a for a, b in zip(before, after, strict=True)] == [1.0, 1.0, 0.0]
    labels = {"webhook": "validate", "namespace": "team-b", "le": "0.005"}
    assert REGISTRY.get_sample_value(f"{NAME}_bucket", labels) is not None
