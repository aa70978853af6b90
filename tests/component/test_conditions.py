"""Conditional steps (`when:`) served by the real tritonserver (nvidia-pytriton wheel, CPU), on both
backends: the generated Python orchestrator, or the native switch in the pipeline's ensemble
(compiler/switch_plan.py); each evaluates each condition per request and calls each branch's ensemble
(examples/conditional.yaml)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

from component.test_triton_integration import extractor, head_b, head_c, infer
from helpers import ROUTERS, check_with_reference, conditional_by_size, example, images_at_once, with_router

pytestmark = pytest.mark.tritonserver

SMALL = np.array([[-1.0, -2.0, 0.5, 0.25]], dtype=np.float32)  # sums below 0: label 0, the small branch
LARGE = np.array([[1.0, 2.0, -0.5, 0.25]], dtype=np.float32)  # label 1, the large branch


@pytest.fixture(scope="module", params=ROUTERS)
def router(request: pytest.FixtureRequest) -> str:
    """What serves the conditions: `python` (the orchestrator) or `native` (the switch)."""
    return str(request.param)


@pytest.fixture
def serve(shared_pipeline, router: str):
    """serve(doc): the shared server of the doc, its conditions served on the module's backend."""
    return lambda doc: shared_pipeline(with_router(doc, router))


def small_answered(out: dict[str, np.ndarray]) -> None:
    """The `conditional` pipeline's answer to SMALL: the small branch's, the large one's left out."""
    assert out["LABEL"].tolist() == [[0]]
    np.testing.assert_allclose(out["RESULT"], extractor(SMALL))
    np.testing.assert_allclose(out["SMALL"], extractor(SMALL))
    assert "SCORE" not in out  # written only by the large branch, which was not taken


def large_answered(out: dict[str, np.ndarray]) -> None:
    """... and to LARGE: the large branch's (RESULT from its orFrom), SMALL its default."""
    assert out["LABEL"].tolist() == [[1]]
    np.testing.assert_allclose(out["RESULT"], head_b(LARGE))
    np.testing.assert_allclose(out["SCORE"], head_c(head_b(LARGE)))
    np.testing.assert_allclose(out["SMALL"], np.zeros_like(LARGE))  # its default


MIXED = [SMALL * (k + 1) if k % 2 else LARGE * (k + 1) for k in range(16)]  # half of each label


def mixed_answered(server) -> None:
    """MIXED sent to the `conditional` pipeline at once: each request gets its own branch's answer."""
    answers = images_at_once(server.grpc_url, "conditional", MIXED, ("RESULT", "SCORE", "SMALL", "LABEL"))
    for image, out in zip(MIXED, answers, strict=True):
        large = image.sum() > 0
        assert out["LABEL"] is not None and out["LABEL"].tolist() == [[int(large)]]
        np.testing.assert_allclose(out["RESULT"], head_b(image) if large else extractor(image), rtol=1e-6)
        if large:
            np.testing.assert_allclose(out["SCORE"], head_c(head_b(image)), rtol=1e-6)
            np.testing.assert_allclose(out["SMALL"], np.zeros_like(image))
        else:
            assert out["SCORE"] is None
            np.testing.assert_allclose(out["SMALL"], extractor(image), rtol=1e-6)


def test_small_branch_answers_and_leaves_the_large_out(serve):
    small_answered(infer(serve(example("conditional")), "conditional", {"IMAGE": SMALL}))


def test_large_branch_answers_and_defaults_the_small(serve):
    large_answered(infer(serve(example("conditional")), "conditional", {"IMAGE": LARGE}))


def test_a_batch_whose_requests_take_different_branches(serve, router: str):
    """Requests sent at once meet in one batch of the orchestrator; each gets its own branch's answer
    (the server's statistics show each branch called at most once per batch: the orchestrator joins a
    batch's requests; the switch, which takes one request at a time, calls one branch per request)."""
    server = serve(example("conditional"))
    before = _counts(server, router)
    mixed_answered(server)
    rows, calls, batches = (after - was for after, was in zip(_counts(server, router), before, strict=True))
    assert rows == len(MIXED)  # every request reached its branch, once
    assert calls <= 2 * batches  # each branch called at most once per batch of the orchestrator


def _counts(server, router: str) -> tuple[int, int, int]:
    """(rows the branches ran, calls they got, batches the orchestrator (or the switch) executed) so
    far."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        stats = client.get_inference_statistics(headers=server.admin_headers())["model_stats"]
    finally:
        client.close()
    by_name = {s["name"]: s for s in stats}
    branches = [by_name[f"conditional__when{k}"] for k in (0, 1)]
    return (
        sum(int(b["inference_count"]) for b in branches),
        sum(int(b["inference_stats"]["success"]["count"]) for b in branches),
        int(by_name["conditional" if router == "python" else "conditional__switch"]["execution_count"]),
    )


@pytest.mark.parametrize(("size", "branch"), [("s", "small"), ("xs", "small"), ("l", "large"), ("m", None)])
def test_a_string_input_chooses_the_branch(serve, size: str, branch: str | None) -> None:
    sized_answered(serve(conditional_by_size(["xs", "s"])), size, branch)


def sized_answered(server, size: str, branch: str | None) -> None:
    """`conditional_by_size(["xs", "s"])` (no head: the condition on the string input SIZE) answers LARGE
    with SIZE `size` from `branch` (None: neither)."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        image = httpclient.InferInput("IMAGE", [1, 4], "FP32")
        image.set_data_from_numpy(LARGE)
        label = httpclient.InferInput("SIZE", [1, 1], "BYTES")
        label.set_data_from_numpy(np.array([[size.encode()]], dtype=np.object_))
        result = client.infer("conditional", [image, label])
    finally:
        client.close()
    names = {o["name"] for o in result.get_response()["outputs"]}
    if branch is None:  # no branch taken: RESULT and SCORE are left out, SMALL takes its default
        assert names == {"SMALL"}
        np.testing.assert_allclose(result.as_numpy("SMALL"), np.zeros_like(LARGE))
    elif branch == "small":
        assert names == {"RESULT", "SMALL"}
        np.testing.assert_allclose(result.as_numpy("RESULT"), extractor(LARGE))
    else:
        assert names == {"RESULT", "SCORE", "SMALL"}
        np.testing.assert_allclose(result.as_numpy("SCORE"), head_c(head_b(LARGE)))


def test_a_switch_sends_each_request_to_one_branch(serve) -> None:
    """examples/conditional.yaml's `switched`: label 1 takes its case (large), any other its default
    (small), in one batch of both."""
    server = serve(example("conditional"))
    images = [SMALL, LARGE, SMALL * 2, LARGE * 3]

    for image, out in zip(
        images, images_at_once(server.grpc_url, "switched", images, ("RESULT",)), strict=True
    ):
        np.testing.assert_allclose(out["RESULT"], head_b(image) if image.sum() > 0 else extractor(image))


def test_e2e_reference_agrees_with_the_served_answers(serve, tmp_path) -> None:
    """e2e/infer.py --spec (the oracle of `make e2e` and the pod-level scenarios) evaluates the
    conditions itself; on seeded random requests both pipelines of the example answer as it says."""
    doc = example("conditional")
    server = serve(doc)
    out = check_with_reference(server.http_url, doc, tmp_path, range(4))
    assert out.count("PASS") == 2, out


def test_a_pipeline_that_does_not_batch_fills_its_default_per_request(serve) -> None:
    """maxBatchSize 0: the orchestrator and its parts take full shapes, and a default takes the rows of
    the request (its first dimension) where its model batches."""
    doc = example("conditional")
    pipeline = doc["spec"]["pipelines"][0]
    pipeline["maxBatchSize"] = 0
    pipeline["inputs"][0]["dims"] = [-1, 4]
    server = serve(doc)
    both = np.concatenate([LARGE, LARGE * 2])  # two rows, one label
    out = infer(server, "conditional", {"IMAGE": both})
    np.testing.assert_allclose(out["RESULT"], head_b(both))
    np.testing.assert_allclose(out["SMALL"], np.zeros_like(both))
    out = infer(server, "conditional", {"IMAGE": SMALL})
    np.testing.assert_allclose(out["RESULT"], extractor(SMALL))
    assert "SCORE" not in out
