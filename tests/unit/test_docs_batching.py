"""The docs' rule for a pipeline's default maxBatchSize is the compiler's rule: the sentences (the pipelines
and rules pages, the field reference) are checked verbatim, and the rule they state is checked against
the compiler on several pipelines."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import docs_page, example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.spec import parse_pipeline

# where the rule is stated: the pipelines page, the rules page and the generated field reference
PAGES = ("concepts/pipelines.md", "concepts/validation.md", "reference/fields.md")

DEFAULT_RULE = (
    "A pipeline's `maxBatchSize` defaults to the smallest `maxBatchSize` among its batching steps (a step "
    "with `maxBatchSize: 0` does not limit it, as in Triton; its dims are full shapes), and to 0 when no "
    "step batches"
)
EXPLICIT_RULE = "ensemble `maxBatchSize` <= every batching step's"
FIELD_ROW = "Ensemble max batch size; default: the smallest of its batching steps' (0 if none batches)."


def diamond(sizes: tuple[int, ...], ensemble: int, explicit: bool = False) -> dict[str, Any]:
    """examples/diamond.yaml with these maxBatchSizes for extractor, head_b, head_c and join: a
    non-batching model's dims get the batch dimension; the pipeline input's dims are those of an
    ensemble of maxBatchSize `ensemble` (written into the spec with `explicit`)."""
    doc = example("diamond")
    for model, size in zip(doc["spec"]["models"], sizes, strict=True):
        model["maxBatchSize"] = size
        if size == 0:
            model.pop("dynamicBatching", None)
            for t in model["inputs"] + model["outputs"]:
                t["dims"] = [-1, *t["dims"]]
    pipeline = doc["spec"]["pipelines"][0]
    pipeline["inputs"][0]["dims"] = [4] if ensemble > 0 else [-1, 4]
    if explicit:
        pipeline["maxBatchSize"] = ensemble
    return doc


def ensemble_batch_size(doc: dict[str, Any]) -> int:
    (plan,) = compile_pipeline(parse_pipeline(doc)).plan.ensembles
    return plan.max_batch_size


def docs_text() -> str:
    return " ".join(" ".join(docs_page(page) for page in PAGES).split())


def test_the_docs_state_the_rules() -> None:
    text = docs_text()
    assert DEFAULT_RULE in text
    assert EXPLICIT_RULE in text
    assert f"| `spec.pipelines[].maxBatchSize` | integer | 0..1048576 | {FIELD_ROW} |" in text


@pytest.mark.parametrize(
    ("sizes", "default"),
    [((8, 8, 8, 8), 8), ((8, 2, 8, 4), 2), ((8, 8, 8, 0), 8), ((0, 4, 16, 0), 4), ((16, 0, 0, 0), 16),
     ((0, 0, 0, 0), 0)],
    ids=["all-8", "smallest-wins", "last-does-not-batch", "first-does-not-batch", "one-batches", "none"],
)  # fmt: skip
def test_compiler_follows_the_documented_default(sizes: tuple[int, ...], default: int) -> None:
    """DEFAULT_RULE worked out by hand for each case (not recomputed by a formula like the compiler's)."""
    assert ensemble_batch_size(diamond(sizes, default)) == default


@pytest.mark.parametrize(("sizes", "ensemble"), [((8, 8, 8, 8), 3), ((8, 0, 8, 8), 8), ((16, 0, 0, 16), 16)])
def test_an_explicit_size_up_to_every_batching_step_is_kept(sizes: tuple[int, ...], ensemble: int) -> None:
    assert ensemble_batch_size(diamond(sizes, ensemble, explicit=True)) == ensemble


def test_an_explicit_size_over_a_batching_step_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        ensemble_batch_size(diamond((8, 0, 4, 8), 8, explicit=True))
    assert [p.path for p in err.value.problems] == ["spec.pipelines[0].maxBatchSize"]
