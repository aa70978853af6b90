"""Ensemble pitfalls around sequences, decoupled steps and fan-outs, the compiler's side: a sequence-batched
step after a decoupled step is refused by every route (rules.SEQUENCE_AFTER_DECOUPLED), several instances
before a sequence step must keep their order (rules.UNORDERED_BEFORE_SEQUENCE), and instances are counted
per GPU. The pitfalls, the real models and the answers served on the real tritonserver:
tests/component/test_ensemble_pitfalls.py."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import compile_to_serve, doc_of
from support.ensemble_pitfalls import (
    AFTER,
    BEFORE,
    BEHIND_ROUTER,
    accumulator,
    dequantize,
    expand,
    pipeline,
    plain,
    slow_first,
    through,
)
from tritonpipeline.compiler import compile_pipeline, rules
from tritonpipeline.compiler.triton_config import mc, parse_text
from tritonpipeline.spec import parse_pipeline
from unit.test_spec_errors import problems_of

# --------------------------------------------------------------------------- the rule, every route


def refused(models: list[dict[str, Any]], pipe: dict[str, Any]) -> list[str]:
    problems = problems_of(doc_of("p", models, [pipe]))
    return [f"{p.path}: {p.message}" for p in problems if "is sequence-batched and reads" in p.message]


def test_directly_after_a_decoupled_step_is_refused_naming_both_steps() -> None:
    (message,) = refused([expand(), accumulator()], AFTER)
    assert message.startswith("spec.pipelines[0].steps[1]: step 'accumulator' (model 'accumulator')")
    assert "decoupled step 'expand' (expand -> accumulator)" in message
    assert "START once per response" in message and "decoupled: false" in message


def test_through_other_steps_is_refused_with_the_route() -> None:
    pipe = pipeline(
        "chain",
        [
            {"model": "expand", "inputs": {"X": "inputs.X"}},
            {"name": "a", "model": "mid", "inputs": {"X": "expand.Y"}},
            {"name": "b", "model": "mid", "inputs": {"X": "a.Y"}},
            {"model": "accumulator", "inputs": {"VALUE": "b.Y"}},
        ],
        {"TOTAL": "accumulator.TOTAL"},
    )
    (message,) = refused([expand(), plain("mid"), accumulator()], pipe)
    assert message.startswith("spec.pipelines[0].steps[3]: ")
    assert "decoupled step 'expand' (expand -> a -> b -> accumulator)" in message


def test_behind_a_fan_out_of_the_decoupled_step_is_refused() -> None:
    """expand.Y goes to the accumulator and to a pipeline output: a router is inserted between them,
    which copies every response through with the request's flags; still refused."""
    pipe = pipeline(
        "fan",
        [
            {"model": "expand", "inputs": {"X": "inputs.X"}},
            {"model": "accumulator", "inputs": {"VALUE": "expand.Y"}},
        ],
        {"TOTAL": "accumulator.TOTAL", "Y": "expand.Y"},
    )
    (message,) = refused([expand(), accumulator()], pipe)
    assert "decoupled step 'expand' (expand -> accumulator)" in message


def test_a_decoupled_step_inside_a_fan_out_and_join_is_refused_at_the_sequence_step() -> None:
    """inputs.X fans out to expand and to a plain step; both rejoin in a plain step (same decoupled origin
    is not possible here, so the join reads expand twice) and the accumulator follows the join."""
    pipe = pipeline(
        "join",
        [
            {"model": "expand", "inputs": {"X": "inputs.X"}},
            {"name": "left", "model": "mid", "inputs": {"X": "expand.Y"}},
            {"name": "right", "model": "mid2", "inputs": {"X": "expand.Y"}},
            {"name": "both", "model": "pair", "inputs": {"A": "left.Y", "B": "right.Y"}},
            {"model": "accumulator", "inputs": {"VALUE": "both.Y"}},
        ],
        {"TOTAL": "accumulator.TOTAL"},
    )
    pair = {**plain("pair"), "inputs": [{"name": n, "dataType": "FP32", "dims": [1]} for n in ("A", "B")]}
    (message,) = refused([expand(), plain("mid"), plain("mid2"), pair, accumulator()], pipe)
    assert message.startswith("spec.pipelines[0].steps[4]: ")
    assert "(expand -> left -> both -> accumulator)" in message


def test_the_nearest_decoupled_step_is_named_and_the_others_listed() -> None:
    pipe = pipeline(
        "two",
        [
            {"name": "first", "model": "expand", "inputs": {"X": "inputs.X"}},
            {"name": "second", "model": "expand", "inputs": {"X": "first.Y"}},
            {"model": "accumulator", "inputs": {"VALUE": "second.Y"}},
        ],
        {"TOTAL": "accumulator.TOTAL"},
    )
    (message,) = refused([expand(), accumulator()], pipe)
    assert "decoupled step 'second' (second -> accumulator); also of decoupled step(s) 'first'" in message


def test_the_sequence_step_first_and_a_decoupled_sequence_step_compile() -> None:
    compile_to_serve(doc_of("before", [expand(), accumulator()], [BEFORE]))
    stateful_stream = {**accumulator(), "decoupled": True}  # decoupled itself, nothing decoupled upstream
    pipe = pipeline(
        "alone", [{"model": "accumulator", "inputs": {"VALUE": "inputs.X"}}], {"T": "accumulator.TOTAL"}
    )
    compile_to_serve(doc_of("alone", [stateful_stream], [pipe]))


@pytest.mark.parametrize("preserve", [None, False])
def test_several_instances_before_a_sequence_step_are_refused_unless_they_keep_order(preserve: Any) -> None:
    problems = problems_of(
        doc_of("p", [slow_first("slow", 2, preserve), accumulator()], [through("p", "slow")])
    )
    (message,) = [f"{p.path}: {p.message}" for p in problems]
    assert message.startswith("spec.pipelines[0].steps[0]: step 'first' (model 'slow') may run 2 instances")
    assert "feeds sequence-batched step 'accumulator' (first -> accumulator)" in message
    assert "Set dynamicBatching: {preserveOrdering: true} on model 'slow'" in message


def test_one_instance_or_kept_order_before_a_sequence_step_compiles() -> None:
    for first in (slow_first("slow", 1, None), slow_first("slow", 3, True)):
        compile_to_serve(doc_of("p", [first, accumulator()], [through("p", "slow")]))
    # several instances after the sequence step: its answers are no sequence's requests any more
    after = pipeline(
        "after",
        [
            {"model": "accumulator", "inputs": {"VALUE": "inputs.X"}},
            {"name": "last", "model": "slow", "inputs": {"X": "accumulator.TOTAL"}},
        ],
        {"Y": "last.Y"},
    )
    compile_to_serve(doc_of("after", [slow_first("slow", 2, None), accumulator()], [after]))


def test_instances_counted_per_gpu() -> None:
    """A GPU group's count is per GPU of the pod unless it pins GPUs; no group is one instance per GPU."""
    from tritonpipeline.spec import Model

    def count(instances: list[dict[str, Any]], gpus: int) -> int:
        model = Model.model_validate({**plain("m"), "instances": instances})
        return rules.max_instances(model, gpus)

    assert count([{"kind": "GPU", "count": 1}], 2) == 2
    assert count([{"kind": "GPU", "count": 2, "gpus": [1]}], 2) == 2
    assert count([{"kind": "GPU", "count": 1}], 0) == 1  # a CPU-only pod runs GPU groups on the CPU
    assert count([{"kind": "CPU", "count": 3}], 4) == 3
    assert count([], 2) == 2
    assert count([], 0) == 1  # the Python backend's default: one CPU instance


@pytest.mark.parametrize(
    "runtime",
    [{"backend": "onnxruntime"}, {"platform": "onnxruntime_onnx"}, {"platform": "tensorflow_savedmodel"}],
)
def test_no_group_on_a_cpu_pod_is_two_instances_of_onnx_runtime_and_tensorflow(
    runtime: dict[str, str],
) -> None:
    """Triton gives these backends two CPU instances by default (core's SetDefaultInstanceCount), which
    can reorder a sequence in front of a sequence step like any two instances; others get one."""
    from tritonpipeline.spec import Model

    m = {k: v for k, v in plain("m").items() if k not in ("backend", "instances")} | runtime
    assert rules.max_instances(Model.model_validate(m), 0) == 2
    assert rules.max_instances(Model.model_validate(m), 1) == 1


def _router_groups(gpus: int, pipe: dict[str, Any], pinned: int = 0) -> list[Any]:
    """The instance groups of the pipeline's one router, compiled for a pod with `gpus` GPUs."""
    # the user's steps pinned to one GPU, so they keep order themselves (the rule above)
    one = [{"kind": "GPU", "count": 1, "gpus": [pinned]}]
    models = [{**m, "instances": one} for m in (dequantize(), accumulator())]
    doc = doc_of("p", models, [pipe])
    doc["spec"]["server"]["gpus"] = gpus
    artifacts = compile_pipeline(parse_pipeline(doc))  # as the operator renders it: GPU groups kept
    (router,) = artifacts.plan.routers
    config = parse_text(artifacts.files[f"{router.name}/config.pbtxt"].decode())
    return list(config.instance_group)


def test_a_router_in_front_of_a_sequence_step_runs_one_instance_on_several_gpus() -> None:
    """A GPU group's count is per GPU: on a pod with two GPUs a router would run two instances, and could
    reorder a sequence like any step (above). In front of a sequence step it is pinned to one GPU: the one
    its steps pin, else GPU 0."""
    (group,) = _router_groups(2, BEHIND_ROUTER)
    assert (group.kind, group.count, list(group.gpus)) == (mc.ModelInstanceGroup.KIND_GPU, 1, [0])
    (group,) = _router_groups(1, BEHIND_ROUTER)  # one GPU: one instance already
    assert list(group.gpus) == []
    # on the GPU its steps are pinned to, so that the tensor need not move to GPU 0 and back
    (group,) = _router_groups(4, BEHIND_ROUTER, pinned=3)
    assert (group.count, list(group.gpus)) == (1, [3])
    # a fan-out that feeds no sequence step keeps one instance per GPU
    no_sequence = {
        **BEHIND_ROUTER,
        "steps": BEHIND_ROUTER["steps"][:1],
        "outputs": [{"name": "A", "from": "dequantize.VALUE"}, {"name": "B", "from": "dequantize.VALUE"}],
    }
    (group,) = _router_groups(2, no_sequence)
    assert list(group.gpus) == []
