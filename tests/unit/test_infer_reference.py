"""e2e/infer.py's reference evaluation, the oracle of the pod-level scenarios: a CR's graph evaluated with
what each model of model_repository/ computes (numbers worked out by hand from the models' docstrings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from e2e.infer import Pipeline

ROOT = Path(__file__).resolve().parents[2]


def _example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())["spec"])


def test_diamond_is_evaluated_in_dependency_order() -> None:
    spec = _example("diamond")
    spec["pipelines"][0]["steps"].reverse()  # the order written does not matter
    pipeline = Pipeline(spec, spec["pipelines"][0])
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    # feats 3,5,7,9; head_b 7,13,19,25; head_c 24; join 7-24 ...
    np.testing.assert_allclose(pipeline.expected({"IMAGE": x}, {})["RESULT"], [[-17, -11, -5, 1]])


def test_fanout_outputs_come_from_the_named_steps() -> None:
    spec = _example("fanout")
    out = Pipeline(spec, spec["pipelines"][0]).expected({"IMAGE": np.array([[0, 1, 0, 1]], np.float32)}, {})
    np.testing.assert_allclose(out["FEATURES"], [[1, 3, 1, 3]])
    np.testing.assert_allclose(out["SCORE_B"], [[1, 7, 1, 7]])
    np.testing.assert_allclose(out["SCORE_C"], [[8]])


def test_a_sequence_keeps_its_running_total_per_state() -> None:
    spec = _example("streaming")
    pipeline = Pipeline(spec, spec["pipelines"][0])
    assert pipeline.stateful
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    totals = [
        float(pipeline.expected({"CHUNK": np.array([[code]], np.int32)}, state)["TOTAL"][0, 0])
        for code, state in [(4, first), (100, second), (-2, first), (1, second)]
    ]
    assert totals == [2.0, 50.0, 1.0, 50.5]  # each sequence sums its own halves


def test_models_without_a_reference_and_cycles_are_refused() -> None:
    spec = _example("diamond")
    spec["pipelines"][0]["steps"][1]["model"] = "nowhere"
    with pytest.raises(ValueError, match="no reference for models \\['nowhere'\\]"):
        Pipeline(spec, spec["pipelines"][0])
    spec = _example("diamond")
    spec["pipelines"][0]["steps"][1]["inputs"]["FEATS_IN_B"] = "merge.JOINED"
    pipeline = Pipeline(spec, spec["pipelines"][0])
    with pytest.raises(ValueError, match="never get inputs"):
        pipeline.expected({"IMAGE": np.zeros((1, 4), np.float32)}, {})


def test_conditions_skip_their_steps_and_outputs_take_the_branch_that_ran() -> None:
    spec = _example("conditional")
    pipeline = Pipeline(spec, spec["pipelines"][0])
    small = pipeline.expected({"IMAGE": np.array([[-1, -2, 0.5, 0.25]], np.float32)}, {})
    assert small["LABEL"].tolist() == [[0]]
    np.testing.assert_allclose(small["RESULT"], [[-1, -3, 2, 1.5]])  # extractor: 2x + 1
    assert small["SCORE"] is None  # score is skipped: left out of the response
    large = pipeline.expected({"IMAGE": np.array([[1, 2, -0.5, 0.25]], np.float32)}, {})
    np.testing.assert_allclose(large["RESULT"], [[1, 4, -3.5, -1.25]])  # head_b: 3x - 2
    np.testing.assert_allclose(large["SCORE"], [[0.25]])
    np.testing.assert_allclose(large["SMALL"], [[0, 0, 0, 0]])  # its default


def test_a_switch_takes_its_case_else_its_default() -> None:
    spec = _example("conditional")
    pipeline = Pipeline(spec, spec["pipelines"][1])
    x = np.array([[1, 2, -0.5, 0.25]], np.float32)
    np.testing.assert_allclose(pipeline.expected({"IMAGE": x}, {})["RESULT"], 3 * x - 2)
    np.testing.assert_allclose(pipeline.expected({"IMAGE": -x}, {})["RESULT"], 2 * -x + 1)
