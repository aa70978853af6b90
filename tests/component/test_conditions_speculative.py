"""Speculative branches (`speculative: true`) served by the real tritonserver (nvidia-pytriton wheel,
CPU): the native switch's ensemble runs every branch's steps beside the classifier, for every request,
and the switch answers with the outputs of the branches taken only (compiler/switch_plan.py). Where the
Python orchestrator serves the pipeline, it waits for the condition: same answers, branches called only
where taken."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from component.test_conditions import (
    LARGE,
    SMALL,
    large_answered,
    mixed_answered,
    sized_answered,
    small_answered,
)
from component.test_triton_integration import extractor, head_b, infer
from helpers import (
    check_with_reference,
    conditional_by_size,
    example,
    images_at_once,
    speculative,
    with_router,
)

pytestmark = pytest.mark.tritonserver

OUTPUTS = ("RESULT", "SCORE", "SMALL", "LABEL")


def served(router: str) -> dict[str, Any]:
    """examples/conditional.yaml with both pipelines speculative, served on `router`."""
    return speculative(with_router(example("conditional"), router))


def _stats(server) -> dict[str, dict[str, Any]]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        stats = client.get_inference_statistics(headers=server.admin_headers())["model_stats"]
    finally:
        client.close()
    return {s["name"]: s for s in stats}


def _rows(server, *models: str) -> list[int]:
    """Rows each model has run so far (Triton's inference_count)."""
    stats = _stats(server)
    return [int(stats[m]["inference_count"]) if m in stats else 0 for m in models]


def test_each_branch_answers_and_the_untaken_leaves_its_outputs_out(shared_pipeline):
    """Both branches ran for each request; the answers are those of the branch taken: SCORE left out of
    the small one's, RESULT and SMALL of the large one's from its orFrom and default, over the small
    branch's answer that was there."""
    server = shared_pipeline(served("native"))
    small_answered(infer(server, "conditional", {"IMAGE": SMALL}))
    large_answered(infer(server, "conditional", {"IMAGE": LARGE}))


def test_every_branch_runs_for_every_request_and_no_branch_is_called(shared_pipeline):
    """16 requests at once, half of each label: each gets its own branch's answer; every branch's models
    ran every request's rows, and no branch's ensemble was called (the switch calls nothing)."""
    server = shared_pipeline(served("native"))
    models = ("extractor", "head_b", "head_c", "conditional__when0", "conditional__when1")
    before = _rows(server, *models)
    mixed_answered(server)
    ran = [after - start for start, after in zip(before, _rows(server, *models), strict=True)]
    assert ran == [16, 16, 16, 0, 0], dict(zip(models, ran, strict=True))


def test_a_speculative_switch_keeps_the_case_taken(shared_pipeline):
    """`switched`: both branches write RESULT for every request; the switch keeps the case's answer."""
    server = shared_pipeline(served("native"))
    images = [SMALL, LARGE, SMALL * 2, LARGE * 3]
    for image, out in zip(images, images_at_once(server.grpc_url, "switched", images, OUTPUTS), strict=True):
        np.testing.assert_allclose(out["RESULT"], head_b(image) if image.sum() > 0 else extractor(image))


@pytest.mark.parametrize(("size", "branch"), [("s", "small"), ("l", "large"), ("m", None)])
def test_without_a_head_the_branches_run_alone(shared_pipeline, size: str, branch: str | None):
    """Conditions on a pipeline input, no step without `when`: the ensemble is the branches' steps and the
    switch; a request that takes no branch gets only the default."""
    sized_answered(
        shared_pipeline(speculative(with_router(conditional_by_size(["xs", "s"]), "native"))), size, branch
    )


def test_the_reference_agrees_with_the_speculative_answers(shared_pipeline, tmp_path):
    """e2e/infer.py --spec (the oracle of `make e2e`) on seeded random requests: both pipelines."""
    doc = served("native")
    out = check_with_reference(shared_pipeline(doc).http_url, doc, tmp_path, range(4))
    assert out.count("PASS") == 2, out


def test_the_python_orchestrator_waits_for_the_condition(shared_pipeline):
    """The Python orchestrator does not speculate: same answers, and the branch not taken never runs."""
    server = shared_pipeline(served("python"))
    before = _rows(server, "extractor", "head_b")
    out = infer(server, "conditional", {"IMAGE": LARGE})
    np.testing.assert_allclose(out["RESULT"], head_b(LARGE))
    np.testing.assert_allclose(out["SMALL"], np.zeros_like(LARGE))
    ran = [after - start for start, after in zip(before, _rows(server, "extractor", "head_b"), strict=True)]
    assert ran == [0, 1]
