"""The chart's `helm test` program (tritonpipeline.runtime.chart_test): its pipeline is one the webhook admits
and the compiler compiles for CPU, its model and pipeline answer 4 * IN on the real tritonserver, and its
answer check refuses a wrong or missing output. On kind, `make e2e` runs the chart's test itself.
Here the pure tests; those on real components are in tests/component/test_chart_test.py."""

from __future__ import annotations

from typing import Any

import pytest

from tritonpipeline.render import checks
from tritonpipeline.runtime import chart_test


def test_the_pipeline_is_admitted_and_asks_for_no_gpu() -> None:
    doc = chart_test.pipeline("tp-test", "triton-pipeline", "tp-test-models")
    verdict = checks.validate(doc, stored=True)
    assert verdict.allowed, verdict.problems
    tp = verdict.valid()[0]
    assert tp.spec.server.gpus == 0
    assert {i.kind for m in tp.spec.models for i in m.instances} == {"CPU"}
    assert doc["spec"]["modelRepository"]["uri"] == "pvc://tp-test-models/repository"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"outputs": [{"name": "OUT", "data": [4.0, 8.0, 12.0, 16.0]}]}, None),
        ({"outputs": [{"name": "OUT", "data": [2.0, 4.0, 6.0, 8.0]}]}, "OUT is [2.0, 4.0, 6.0, 8.0]"),
        ({"outputs": [{"name": "Y", "data": [4.0, 8.0, 12.0, 16.0]}]}, "no output OUT in the answer"),
        ({}, "no output OUT"),
    ],
)
def test_the_answer_check_names_what_is_wrong(answer: dict[str, Any], says: str | None) -> None:
    problem = chart_test.answer_problem(answer)
    assert problem is None if says is None else (problem is not None and says in problem)


def test_a_refused_spec_ends_the_wait_with_the_operator_s_reason() -> None:
    refused = {
        "status": {
            "conditions": [
                {"type": "SpecValid", "status": "False", "reason": "InvalidSpec", "message": "spec.x: bad"},
                {"type": "Ready", "status": "False", "reason": "InvalidSpec"},
            ]
        }
    }
    assert chart_test.spec_refused(refused) == "InvalidSpec: spec.x: bad"
    assert (
        chart_test.spec_refused({"status": {"conditions": [{"type": "SpecValid", "status": "True"}]}}) is None
    )
    assert chart_test.spec_refused(None) is None
