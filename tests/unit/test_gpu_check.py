"""bench/gpu/check.py's conditional section (section 6), the parts that need no GPU: the pipeline it
serves compiles to the parts it names, the inputs and answers it expects, and how its copies and checks
become verdicts. The section itself needs a GPU (`make gpu-check`)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from bench.gpu import check
from tritonpipeline.cli import compile_file
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.spec import parse_text

FEATS = check.FEATS_BYTES


def _copies(**dtoh: float) -> dict[str, dict[str, dict[str, float]]]:
    """Counted copies by label: each path's DtoH bytes a request as given, 16 bytes HtoD (the seed)."""
    labels = [*check.conditional_paths(), "control"]
    return {label: {"bytes_per_request": {"HtoD": 16.0, "DtoH": dtoh.get(label, 16.0)}} for label in labels}


def _section(**copies: float) -> dict[str, object]:
    """Section 6's results on a GPU where everything holds, with the DtoH bytes given by label."""
    copied = _copies(**{"control": FEATS + 16, **copies})
    return {
        "instance_kinds": {
            check.CONDITIONAL: ["KIND_CPU"],
            **{m: ["KIND_GPU"] for m in ("gpu_producer", "gpu_head", "gpu_scale")},
        },
        "outputs": {"both_branches_right": True, "mixed": {"errors": 0}},
        "copies": {**copied, "added_by_condition": check.added_by_condition(copied)},
    }


def test_the_conditional_pipeline_compiles_to_the_parts_the_check_names() -> None:
    (c,) = compile_file(str(check.PIPELINE))
    (orchestrator,) = c.artifacts.plan.orchestrators
    assert orchestrator.name == check.CONDITIONAL
    assert orchestrator.head is not None and orchestrator.head.model == check.HEAD_PART
    assert tuple(b.model for b in orchestrator.branches) == check.BRANCH_PARTS
    ensembles = {e.name: e for e in c.artifacts.plan.ensembles}
    # each branch's plain ensemble holds the steps of the head and of that branch, nothing else
    for part, plain in zip(check.BRANCH_PARTS, check.BRANCH_ENSEMBLES, strict=True):
        steps = [s.model for name in (check.HEAD_PART, part) for s in ensembles[name].steps]
        assert steps == [s.model for s in ensembles[plain].steps]
    # the FEATS of the head reach each branch through the orchestrator, and no router is inserted there
    assert all(b.inputs == ("produce.FEATS",) for b in orchestrator.branches)
    assert [r.name for r in c.artifacts.plan.routers] == ["gpu_router__produce__FEATS__router"]


def test_a_requests_branch_and_its_expected_answer() -> None:
    rows = check.branch_rows(1, 3)
    assert rows.dtype == np.int32 and rows.shape == (3, 1) and set(rows.ravel()) == {1}
    seed = np.array([[1.0, -2.0, 0.5, 0.0]], dtype=np.float32)
    assert np.array_equal(check.expected_branch(seed, 0), check.expected_sums(seed))
    assert np.array_equal(check.expected_branch(seed, 1), 2 * check.expected_sums(seed))
    assert check.expected_branch(seed, 1).dtype == np.float32
    # the mixed batch takes each branch as often (added_by_condition compares it with the ensembles' mean)
    assert sorted(check.MIXED) == [0] * 4 + [1] * 4


def test_copies_added_by_the_condition_beyond_the_branchs_ensemble() -> None:
    copied = _copies(
        conditional_branch0=FEATS + 16,  # the orchestrator took FEATS to the host on branch 0
        ensemble_branch1=32.0,
        conditional_branch1=32.0,
        conditional_mixed=FEATS / 2 + 40,
    )
    added = check.added_by_condition(copied)
    assert added == {
        "branch0": {"HtoD": 0.0, "DtoH": FEATS},
        "branch1": {"HtoD": 0.0, "DtoH": 0.0},
        "mixed": {"HtoD": 0.0, "DtoH": FEATS / 2 + 40 - 24},
    }


def test_the_sections_verdicts_hold_where_the_condition_adds_no_copy() -> None:
    verdicts = check.conditional_verdicts(_section())
    assert len(verdicts) == 7 and all(verdicts.values()), verdicts


@pytest.mark.parametrize(
    ("change", "failing"),
    [
        ({"conditional_mixed": FEATS / 2}, "conditional: mixed adds no FEATS copy to its branch's ensemble"),
        ({"conditional_branch1": FEATS}, "conditional: branch1 adds no FEATS copy to its branch's ensemble"),
        ({"control": 16.0}, "conditional: the counter sees the control's 1 MiB device-to-host copy"),
    ],
)
def test_a_copy_the_condition_adds_or_a_blind_counter_fails_the_section(
    change: dict[str, float], failing: str
) -> None:
    verdicts = check.conditional_verdicts(_section(**change))
    assert [claim for claim, ok in verdicts.items() if not ok] == [failing]


def test_wrong_answers_or_cpu_instances_fail_and_no_counter_judges_no_copies() -> None:
    section = _section()
    section["instance_kinds"] = {m: ["KIND_CPU"] for m in ("gpu_producer", "gpu_head", "gpu_scale")}
    section["outputs"] = {"both_branches_right": False, "mixed": {"errors": 3}}
    del section["copies"]
    assert check.conditional_verdicts(section) == {
        "conditional: its steps run as KIND_GPU instances": False,
        "conditional: both branches right, 1 to 8 rows": False,
        "conditional: a mixed concurrent batch right": False,
    }
    # a section that failed before answering anything judges nothing true
    assert not any(check.conditional_verdicts({}).values())


def test_the_section_is_one_of_the_checks_and_judged_only_when_it_ran() -> None:
    assert "conditional" in check.SECTIONS
    assert check.sections("conditional") == ("conditional",)
    with pytest.raises(argparse.ArgumentTypeError):
        check.sections("conditions")
    # the orchestrator's, the switch's and the speculative switch's
    both = {backend: _section() for backend in check.conditional_forms(check.ROUTERS)}
    ran = check.verdicts({"sections": ["conditional"], "checks": {}, "conditional": both})
    assert all(ran.values())
    for backend in ("python", "native"):
        assert sum(claim.startswith(f"conditional ({backend}): ") for claim in ran) == 7
    # a backend whose section never ran (its server failed) judges nothing true
    one = check.verdicts({"sections": ["conditional"], "checks": {}, "conditional": {"python": _section()}})
    assert next(claim for claim, ok in one.items() if not ok).startswith("conditional (native): ")
    others = check.verdicts({"sections": ["example"], "checks": {}, "conditional": both})
    assert not any(claim.startswith("conditional") for claim in others)


def test_a_run_on_one_router_judges_that_router_only() -> None:
    """`--routers native`: the conditional claims of the switch alone (waiting and speculative), none of
    the orchestrator's missing."""
    assert check.routers("native") == ("native",)
    with pytest.raises(argparse.ArgumentTypeError):
        check.routers("native,rust")
    native = {"native": _section(), check.SPECULATIVE: _section()}
    ran = check.verdicts(
        {"sections": ["conditional"], "routers": ["native"], "checks": {}, "conditional": native}
    )
    assert all(ran.values())
    assert not any(claim.startswith("conditional (python)") for claim in ran)
    assert sum(claim.startswith("conditional (native): ") for claim in ran) == 7


def test_the_speculative_form_runs_beside_the_native_switch(tmp_path) -> None:
    """Section 6 serves gpu_conditional once more where the native router runs, speculative: its file is
    the check's pipeline with that one flag (the models where they were), compiled with both branches
    beside the head; and it is judged as the others are."""
    assert check.conditional_forms(("python", "native")) == ("python", "native", check.SPECULATIVE)
    assert check.conditional_forms(("python",)) == ("python",)
    assert check.conditional_served("python", tmp_path) == (check.PIPELINE, "python")
    served, router = check.conditional_served(check.SPECULATIVE, tmp_path)
    assert router == "native" and served.parent == tmp_path
    (tp,) = parse_text(served.read_text(), str(served))
    assert compile_pipeline(tp, native_router=b"\x7fELF").speculative == (check.CONDITIONAL,)
    assert tp.spec.model_repository.uri == str((check.PIPELINE.parent / "models").resolve())
    (plain,) = parse_text(check.PIPELINE.read_text(), str(check.PIPELINE))
    assert compile_pipeline(plain, native_router=b"\x7fELF").speculative == ()
    forms = {form: _section() for form in check.conditional_forms(check.ROUTERS)}
    ran = check.verdicts({"sections": ["conditional"], "checks": {}, "conditional": forms})
    assert all(ran.values()) and sum(c.startswith("conditional (speculative): ") for c in ran) == 7
    missing = check.verdicts(
        {"sections": ["conditional"], "checks": {}, "conditional": {"native": _section()}}
    )
    assert not missing["conditional (speculative): both branches right, 1 to 8 rows"]
