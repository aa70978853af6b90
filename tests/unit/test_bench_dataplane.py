"""bench/dataplane.py's two-branch workloads, the parts that need no server: the floors it measures are
what its report says they are. `branch_ensemble` runs the branch step beside the classifier,
`branch_serial` makes it wait for the classifier, and the compiled variants call the same models. The
runs themselves are `make bench-dataplane`."""

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
    label = dict(serial[classifier].output_map)["LABEL"]
    assert dict(plain[branch].input_map) == {tensor: image}  # only the input: runs beside the classifier
    assert dict(serial[branch].input_map) == {tensor: image, dataplane.COND_AFTER: label}
    assert serial[classifier] == plain[classifier]


@pytest.mark.parametrize("cw", dataplane.CONDS.values(), ids=dataplane.CONDS)
def test_every_variant_runs_the_workloads_own_models(cw: dataplane.CondWorkload) -> None:
    doc = dataplane.cond_doc(cw, Path("/models"))
    declared = {m["name"]: m for m in doc["spec"]["models"]}
    assert set(declared) == set(cw.models.values())
    for role, name in cw.models.items():
        assert declared[name].get("parameters", {}) == cw.parameters.get(role, {})
    native = dataplane.cond_native_doc(cw, Path("/models"))
    assert native["spec"]["server"]["router"] == "native"
    assert [p["name"] for p in native["spec"]["pipelines"]] == [cw.native]
    assert native["spec"]["models"] == doc["spec"]["models"]  # one config per model in the repository
