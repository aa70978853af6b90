"""bench/dataplane.py's two-branch workloads, the parts that need no server: the floors it measures are
what its report says they are (`branch_ensemble` runs the branch step beside the classifier,
`branch_serial` makes it wait for the classifier), and its check that every variant ran the workload's
own models tells a run that did from one that did not. The runs themselves are `make bench-dataplane`."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from bench import dataplane
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.spec import parse_pipeline


def _ensemble_steps(cw: dataplane.CondWorkload, name: str) -> dict[str, mc.ModelEnsembling.Step]:
    """Ensemble `name`'s steps, by model."""
    art = compile_pipeline(
        parse_pipeline(dataplane.cond_doc(cw, Path("/models")), "bench.yaml"), cpu_only=True
    )
    cfg = text_format.Parse(art.files[f"{name}/config.pbtxt"].decode(), mc.ModelConfig())
    return {step.model_name: step for step in cfg.ensemble_scheduling.step}


@pytest.mark.parametrize("cw", dataplane.CONDS.values(), ids=dataplane.CONDS)
@pytest.mark.parametrize("label", sorted(dataplane.COND_BRANCH_STEPS))
def test_the_serial_floor_waits_for_the_classifier_and_the_plain_one_does_not(
    cw: dataplane.CondWorkload, label: int
) -> None:
    _, role, tensor, _ = dataplane.COND_BRANCH_STEPS[label]
    branch, classifier = cw.models[role], cw.models["classifier"]
    plain = _ensemble_steps(cw, cw.branches[label])
    serial = _ensemble_steps(cw, cw.serial[label])
    assert set(plain) == set(serial) == {classifier, branch}
    image = dict(plain[classifier].input_map)["X"]  # the pipeline input, as the ensemble names it
    labelled = dict(serial[classifier].output_map)["LABEL"]
    assert dict(plain[branch].input_map) == {tensor: image}  # only the input: runs beside the classifier
    assert dict(serial[branch].input_map) == {tensor: image, dataplane.COND_AFTER: labelled}
    assert serial[classifier] == plain[classifier]


def _run(requests: int, rows: dict[str, int]) -> dict[str, object]:
    """One measured run as the bench records it: its requests, and the rows each model counted."""
    return {"requests": requests, "step_us": {m: {"inferences": n} for m, n in rows.items()}}


def test_the_models_check_passes_runs_that_reached_the_workloads_models_in_batches_or_not() -> None:
    m = dataplane.COND_COMPUTE.models
    one = _run(10, {m["classifier"]: 10, m["extractor"]: 5, m["head_b"]: 5})
    cond = {"native": {"1": {"rounds": [one, one]}}, "conditional": {"16": {"rounds": [one]}}}
    check = dataplane.ran_own_models(dataplane.COND_COMPUTE, cond)
    assert check["pass"] and check["value"] == []


def test_the_models_check_fails_a_run_that_reached_another_workloads_models() -> None:
    own, other = dataplane.COND_COMPUTE.models, dataplane.COND.models
    right = _run(10, {own["classifier"]: 10, own["extractor"]: 5, own["head_b"]: 5})
    # a BLS model left calling its default models: the answers are the same numbers, the rows are not
    wrong = _run(
        10, {own["classifier"]: 0, other["classifier"]: 10, other["extractor"]: 5, other["head_b"]: 5}
    )
    short = _run(10, {own["classifier"]: 10, own["extractor"]: 5, own["head_b"]: 4})
    cond = {
        "native": {"1": {"rounds": [right]}},
        "bls": {"1": {"rounds": [right, wrong]}, "16": {"rounds": [short]}},
    }
    check = dataplane.ran_own_models(dataplane.COND_COMPUTE, cond)
    assert not check["pass"]
    assert [line.split(":")[0] for line in check["value"]] == ["bls c=1 round 2", "bls c=16 round 1"]
