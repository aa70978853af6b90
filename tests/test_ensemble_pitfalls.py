"""Ensemble pitfalls around sequences, decoupled steps and fan-outs (Triton's tracker is full of them):
each is refused with a message that says why, or served right on the real tritonserver.

- A sequence-batched step after a decoupled step: Triton cannot keep such a sequence whole, so the compiler
  refuses it (rules.SEQUENCE_AFTER_DECOUPLED), by every route; the other order is served right.
- A step with several instances before a sequence step: a sequence's requests sent back to back overtake
  each other there, so it must keep their order (dynamicBatching.preserveOrdering) or is refused
  (rules.UNORDERED_BEFORE_SEQUENCE).
- A model that leaves a declared output unwritten (a bug the compiler cannot see): a step or a router that
  needs the tensor fails the request with an error naming it, at once; a pipeline output left unwritten is
  answered as the model itself answers (without it).
- A decoupled step that answers a request zero times: the pipeline answers it zero times, directly, through a
  step and through a router, and the requests after it are answered as usual (no hang).
- A sequence step behind a fan-out's router: flags and correlation IDs reach it through the router, so
  interleaved sequences keep their own totals; also when the client asks for a subset of the outputs.

The models are real: the product's stateful accumulator (model_repository/accumulator: TOTAL is the running
sum of VALUE within a sequence, START resets it, END forgets it) and dequantizer (VALUE = 0.5 * CODES), and
a decoupled model that answers each request twice, X + 1 then X + 2 (tests/triton_models/expand_model.py).
Expected answers are what a client of the declared pipeline must see, worked out from those definitions,
never read from the code.
"""

from __future__ import annotations

import queue
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from helpers import MODELS, ROUTERS, with_router
from test_spec_errors import problems_of
from test_triton_loads import Repository, compile_doc, doc_of, triton
from tritonpipeline.compiler import compile_pipeline, rules
from tritonpipeline.compiler.triton_config import mc, parse_text
from tritonpipeline.spec import parse_pipeline

EXPAND = Path(__file__).resolve().parent / "triton_models" / "expand_model.py"
PARTIAL = Path(__file__).resolve().parent / "triton_models" / "partial_model.py"
MAYBE = Path(__file__).resolve().parent / "triton_models" / "maybe_model.py"
SLOW_FIRST = Path(__file__).resolve().parent / "triton_models" / "slow_first_model.py"
SEQUENCE = [1.0, 2.0, 3.0]  # one sequence: START with the first request, END with the last
# after: expand answers 1 -> 2, 3; 2 -> 3, 4; 3 -> 4, 5; the accumulator sums all six in one sequence
WHOLE_AFTER = [2.0, 5.0, 8.0, 12.0, 16.0, 21.0]
# before: the accumulator's totals 1, 3, 6, each answered twice by expand (+1, +2)
WHOLE_BEFORE = [2.0, 3.0, 4.0, 5.0, 7.0, 8.0]


def expand(name: str = "expand") -> dict[str, Any]:
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": 8,
        "decoupled": True,
        "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
        "outputs": [{"name": "Y", "dataType": "FP32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
    }


def plain(name: str) -> dict[str, Any]:
    return {**expand(name), "decoupled": False}


def accumulator() -> dict[str, Any]:
    return {
        "name": "accumulator",
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [{"name": "VALUE", "dataType": "FP32", "dims": [1]}],
        "outputs": [{"name": "TOTAL", "dataType": "FP32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
        "sequenceBatching": {
            "strategy": "direct",
            "maxSequenceIdleMicroseconds": 5000000,
            "controls": {"start": "START", "end": "END", "correlationId": "CORRID"},
        },
    }


def pipeline(name: str, steps: list[dict[str, Any]], outputs: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
        "steps": steps,
        "outputs": [{"name": k, "from": v} for k, v in outputs.items()],
    }


AFTER = pipeline(
    "after",
    [
        {"model": "expand", "inputs": {"X": "inputs.X"}},
        {"model": "accumulator", "inputs": {"VALUE": "expand.Y"}},
    ],
    {"TOTAL": "accumulator.TOTAL"},
)
BEFORE = pipeline(
    "before",
    [
        {"model": "accumulator", "inputs": {"VALUE": "inputs.X"}},
        {"model": "expand", "inputs": {"X": "accumulator.TOTAL"}},
    ],
    {"Y": "expand.Y"},
)


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
    compile_doc(doc_of("before", [expand(), accumulator()], [BEFORE]))
    stateful_stream = {**accumulator(), "decoupled": True}  # decoupled itself, nothing decoupled upstream
    pipe = pipeline(
        "alone", [{"model": "accumulator", "inputs": {"VALUE": "inputs.X"}}], {"T": "accumulator.TOTAL"}
    )
    compile_doc(doc_of("alone", [stateful_stream], [pipe]))


# --------------------------------------------------------------------------- the real server


@dataclass(frozen=True)
class Request:
    model: str
    inputs: dict[str, np.ndarray]  # name -> array with the batch dimension
    sequence_id: int
    start: bool
    end: bool


def stream(
    server: Any, requests: list[Request], outputs: list[str] | None = None, quiet: float = 3.0
) -> dict[int, list[Any]]:
    """The requests over one gRPC stream, all sent at once as a streaming client may; every answer per
    request (its index), in arrival order: {output: first value} or the error's text, until none has come
    for `quiet` seconds. `outputs` asks for those outputs only (default: all)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    answers: dict[int, list[Any]] = {k: [] for k in range(len(requests))}
    try:
        for k, r in enumerate(requests):
            tensors = []
            for name, array in r.inputs.items():
                tensors.append(
                    grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                )
                tensors[-1].set_data_from_numpy(array)
            client.async_stream_infer(
                r.model,
                tensors,
                request_id=str(k),
                sequence_id=r.sequence_id,
                sequence_start=r.start,
                sequence_end=r.end,
                outputs=[grpcclient.InferRequestedOutput(o) for o in outputs] if outputs else None,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                result, error = got.get(timeout=quiet)
            except queue.Empty:
                break
            if error is not None:  # an error names no request: count it against the first unanswered
                answers[next((k for k, a in answers.items() if not a), 0)].append(str(error))
                continue
            response = result.get_response()
            values = {o.name: float(result.as_numpy(o.name).reshape(-1)[0]) for o in response.outputs}
            answers[int(response.id)].append(values)
    finally:
        client.stop_stream(cancel_requests=True)  # a request Triton never finishes would hold the stream open
        client.close()
    return answers


def one_sequence(model: str, sequence_id: int) -> list[Request]:
    """SEQUENCE as one sequence: START with the first request, END with the last."""
    last = len(SEQUENCE) - 1
    return [
        Request(model, {"X": np.array([[v]], dtype=np.float32)}, sequence_id, k == 0, k == last)
        for k, v in enumerate(SEQUENCE)
    ]


def flat(answers: dict[int, list[Any]], output: str) -> list[Any]:
    """Every answer in request order: the output's value, or the error's text."""
    return [a[output] if isinstance(a, dict) else a for k in sorted(answers) for a in answers[k]]


def model_root(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    (root / "expand" / "1").mkdir(parents=True)
    shutil.copy(EXPAND, root / "expand" / "1" / "model.py")
    for name in ("accumulator", "dequantize"):
        shutil.copytree(MODELS / name, root / name)
    return root


@pytest.mark.tritonserver
def test_triton_breaks_the_sequence_after_a_decoupled_step_and_serves_the_other_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the rule exists, on the real tritonserver: the pipeline the compiler refuses, rendered with the
    rule switched off, does not give the client the six running totals of one whole sequence. If this
    assertion ever fails, Triton keeps such sequences whole and the refusal can be lifted. The pipeline
    the compiler accepts, the sequence step first, answers exactly what its definition says."""
    models = [expand(), accumulator()]
    before = compile_doc(doc_of("before", models, [BEFORE]))
    with monkeypatch.context() as m:
        m.setattr(rules, "sequence_steps_before_decoupled", lambda g: iter(()))
        after = compile_doc(doc_of("after", models, [AFTER]))
    with triton(tmp_path, Repository.merge([before, after]), model_root(tmp_path)) as server:
        served = flat(stream(server, one_sequence("before", 41)), "Y")
        broken = flat(stream(server, one_sequence("after", 42)), "TOTAL")
    print(f"\nsequence step first: {served}; after the decoupled step: {broken} (whole: {WHOLE_AFTER})")
    assert served == WHOLE_BEFORE
    assert broken != WHOLE_AFTER, "Triton kept the sequence whole: rules.SEQUENCE_AFTER_DECOUPLED may go"
    # the first request's two responses both carried START: the total restarted at the second
    assert broken[:2] == [2.0, 3.0], broken


def dequantize() -> dict[str, Any]:
    return {
        "name": "dequantize",
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [{"name": "CODES", "dataType": "INT32", "dims": [1]}],
        "outputs": [{"name": "VALUE", "dataType": "FP32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
    }


# dequantize.VALUE goes to the accumulator and to a pipeline output: a router sits in front of the accumulator
BEHIND_ROUTER = {
    "name": "behind_router",
    "inputs": [{"name": "CHUNK", "dataType": "INT32", "dims": [1]}],
    "steps": [
        {"model": "dequantize", "inputs": {"CODES": "inputs.CHUNK"}},
        {"model": "accumulator", "inputs": {"VALUE": "dequantize.VALUE"}},
    ],
    "outputs": [
        {"name": "TOTAL", "from": "accumulator.TOTAL"},
        {"name": "VALUE", "from": "dequantize.VALUE"},
    ],
}
# two sequences interleaved request by request on one stream: chunks -> values (x 0.5) -> running totals
CHUNKS = {7: [2, 4, 6], 8: [10, 20, 30]}
TOTALS = {7: [1.0, 3.0, 6.0], 8: [5.0, 15.0, 30.0]}


@pytest.mark.tritonserver
@pytest.mark.parametrize("router", ROUTERS)
def test_a_sequence_step_behind_a_router_keeps_interleaved_sequences_apart(
    router: str, tmp_path: Path
) -> None:
    """The router is a plain model between the pipeline's request and the accumulator: the sequence ID and
    the START/END flags must still reach the accumulator, once per request, so each of two interleaved
    sequences gets its own running totals; asking for TOTAL alone (a subset of the outputs) changes nothing
    but what comes back."""
    artifacts = compile_doc(
        with_router(doc_of("router", [dequantize(), accumulator()], [BEHIND_ROUTER]), router)
    )
    assert [r.name for r in artifacts.plan.routers] == ["behind_router__dequantize__VALUE__router"]
    requests = [
        Request(
            "behind_router",
            {"CHUNK": np.array([[CHUNKS[seq][k]]], dtype=np.int32)},
            seq,
            k == 0,
            k == len(CHUNKS[seq]) - 1,
        )
        for k in range(3)
        for seq in CHUNKS
    ]
    with triton(tmp_path, Repository.merge([artifacts]), model_root(tmp_path)) as server:
        every = stream(server, requests)
        subset = stream(server, requests, outputs=["TOTAL"])
    for answers in (every, subset):
        assert all(len(a) == 1 for a in answers.values()), answers
    got = {
        seq: [every[k][0]["TOTAL"] for k, r in enumerate(requests) if r.sequence_id == seq] for seq in CHUNKS
    }
    assert got == TOTALS
    values = [every[k][0]["VALUE"] for k in range(len(requests))]
    assert values == [0.5 * float(r.inputs["CHUNK"][0, 0]) for r in requests]
    assert [set(subset[k][0]) for k in subset] == [{"TOTAL"}] * len(requests)
    assert [subset[k][0]["TOTAL"] for k in subset] == [every[k][0]["TOTAL"] for k in every]


# --------------------------------------------------------------------------- order before a sequence step


def slow_first(name: str, count: int, preserve: bool | None) -> dict[str, Any]:
    """Y = X with the first chunk slow (tests/triton_models/slow_first_model.py); `preserve`: None is no
    dynamic batching, else dynamicBatching with that preserveOrdering."""
    m = {**plain(name), "instances": [{"kind": "CPU", "count": count}]}
    if preserve is not None:
        m["dynamicBatching"] = {"preserveOrdering": preserve}
    return m


def through(name: str, first: str) -> dict[str, Any]:
    return pipeline(
        name,
        [
            {"name": "first", "model": first, "inputs": {"X": "inputs.X"}},
            {"model": "accumulator", "inputs": {"VALUE": "first.Y"}},
        ],
        {"TOTAL": "accumulator.TOTAL"},
    )


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
        compile_doc(doc_of("p", [first, accumulator()], [through("p", "slow")]))
    # several instances after the sequence step: its answers are no sequence's requests any more
    after = pipeline(
        "after",
        [
            {"model": "accumulator", "inputs": {"VALUE": "inputs.X"}},
            {"name": "last", "model": "slow", "inputs": {"X": "accumulator.TOTAL"}},
        ],
        {"Y": "last.Y"},
    )
    compile_doc(doc_of("after", [slow_first("slow", 2, None), accumulator()], [after]))


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


@pytest.mark.tritonserver
def test_order_before_a_sequence_step_on_the_real_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sequence 1, 2, 3 sent back to back through two instances whose first request is slow: with
    preserveOrdering the accumulator's totals are 1, 3, 6; without it (what the compiler refuses, rendered
    with the rule off) the later requests reach the accumulator first and are refused. If that assertion
    ever fails, Triton keeps the order by itself and the refusal can be lifted."""
    kept_models = [slow_first("slow_kept", 2, True), accumulator()]
    kept = compile_doc(doc_of("kept", kept_models, [through("kept", "slow_kept")]))
    with monkeypatch.context() as m:
        m.setattr(rules, "steps_before_a_sequence_keep_order", lambda g: iter(()))
        free_models = [slow_first("slow_free", 2, None), accumulator()]
        free = compile_doc(doc_of("free", free_models, [through("free", "slow_free")]))
    root = model_root(tmp_path)
    for name in ("slow_kept", "slow_free"):
        (root / name / "1").mkdir(parents=True)
        shutil.copy(SLOW_FIRST, root / name / "1" / "model.py")
    with triton(tmp_path, Repository.merge([kept, free]), root) as server:
        ordered = flat(stream(server, one_sequence("kept", 51)), "TOTAL")
        overtaken = flat(stream(server, one_sequence("free", 52)), "TOTAL")
    print(f"\nkept order: {ordered}; free order: {overtaken}")
    assert ordered == [1.0, 3.0, 6.0]
    assert overtaken != [1.0, 3.0, 6.0], "Triton kept the order: rules.UNORDERED_BEFORE_SEQUENCE may go"
    assert any("must specify the START flag" in str(a) for a in overtaken), overtaken


# --------------------------------------------------------------------------- an output left unwritten


@pytest.mark.tritonserver
@pytest.mark.parametrize("router", ROUTERS)
def test_an_output_left_unwritten_fails_the_request_naming_who_needed_it(router: str, tmp_path: Path) -> None:
    """`partial` declares Y and Z and writes only Y. Read by one step, Z's absence fails the request with
    Triton's error naming that step's model; read by two (a router in between), naming the router, whose
    name says the producer and the tensor. Never a hang: every answer came within the quiet time."""
    partial = {
        **plain("partial"),
        "outputs": [{"name": n, "dataType": "FP32", "dims": [1]} for n in ("Y", "Z")],
    }
    one = pipeline(
        "one",
        [
            {"model": "partial", "inputs": {"X": "inputs.X"}},
            {"name": "n", "model": "mid", "inputs": {"X": "partial.Z"}},
        ],
        {"Y": "partial.Y", "N": "n.Y"},
    )
    two = pipeline(
        "two",
        [
            {"model": "partial", "inputs": {"X": "inputs.X"}},
            {"name": "n", "model": "mid", "inputs": {"X": "partial.Z"}},
            {"name": "o", "model": "mid", "inputs": {"X": "partial.Z"}},
        ],
        {"Y": "partial.Y", "N": "n.Y", "O": "o.Y"},
    )
    artifacts = compile_doc(with_router(doc_of("p", [partial, plain("mid")], [one, two]), router))
    root = tmp_path / "models"
    for name in ("partial", "mid"):  # mid: Y = X, all it declares
        (root / name / "1").mkdir(parents=True)
        shutil.copy(PARTIAL, root / name / "1" / "model.py")
    x = {"X": np.array([[1.0]], dtype=np.float32)}
    with triton(tmp_path, Repository.merge([artifacts]), root) as server:
        start = time.monotonic()
        answers = {
            name: flat(stream(server, [Request(name, x, 0, False, False)], quiet=2), "Y")
            for name in ("one", "two")
        }
        took = time.monotonic() - start
    assert len(answers["one"]) == 1 and "missing required input(s) ['X']" in answers["one"][0], answers
    assert "for model 'mid'" in answers["one"][0]
    assert len(answers["two"]) == 1 and "for model 'two__partial__Z__router'" in answers["two"][0], answers
    assert took < 2 * 2 + 10, f"an answer took long: {took:.1f}s"


@pytest.mark.tritonserver
def test_a_pipeline_output_left_unwritten_is_answered_as_the_model_answers(tmp_path: Path) -> None:
    """`partial` declares Y and Z and writes only Y; a pipeline exposes both. Asked for every output, for Z
    alone, and for Y and Z, the pipeline answers what the model itself answers when called directly with the
    same request: the answer lacks Z, or is empty when only Z is asked for (Triton's ensemble returns the
    outputs its steps produced: triton-inference-server/core PR 399). The pipeline adds no surprise."""
    partial = {
        **plain("partial"),
        "outputs": [{"name": n, "dataType": "FP32", "dims": [1]} for n in ("Y", "Z")],
    }
    exposed = pipeline(
        "exposed", [{"model": "partial", "inputs": {"X": "inputs.X"}}], {"Y": "partial.Y", "Z": "partial.Z"}
    )
    artifacts = compile_doc(doc_of("p", [partial], [exposed]))
    root = tmp_path / "models"
    (root / "partial" / "1").mkdir(parents=True)
    shutil.copy(PARTIAL, root / "partial" / "1" / "model.py")
    x = {"X": np.array([[1.0]], dtype=np.float32)}
    with triton(tmp_path, Repository.merge([artifacts]), root) as server:
        answers = {
            (name, tuple(outputs or ())): stream(
                server, [Request(name, x, 0, False, False)], outputs, quiet=2
            )[0]
            for name in ("partial", "exposed")
            for outputs in (None, ["Z"], ["Y", "Z"])
        }
    for outputs in ((), ("Z",), ("Y", "Z")):
        assert answers[("exposed", outputs)] == answers[("partial", outputs)], (outputs, answers)
    assert answers[("partial", ())] == [{"Y": 1.0}]  # Z was never written


# --------------------------------------------------------------------------- a decoupled step silent


@pytest.mark.tritonserver
def test_a_decoupled_step_that_answers_nothing_leaves_the_stream_going(tmp_path: Path) -> None:
    """`maybe` answers X > 0 with Y = X and X <= 0 with nothing (only the final flag). Requests 1, -1, 2 on
    one stream: the first and last answered with their own values, the middle one not at all, whether the
    decoupled step's answer is the pipeline's, goes through a plain step, or through a router to two steps."""
    maybe = {**expand("maybe")}  # decoupled, X -> Y
    alone = pipeline("alone", [{"model": "maybe", "inputs": {"X": "inputs.X"}}], {"Y": "maybe.Y"})
    then = pipeline(
        "then",
        [
            {"model": "maybe", "inputs": {"X": "inputs.X"}},
            {"name": "m", "model": "mid", "inputs": {"X": "maybe.Y"}},
        ],
        {"Y": "m.Y"},
    )
    fan = pipeline(
        "fan",
        [
            {"model": "maybe", "inputs": {"X": "inputs.X"}},
            {"name": "m", "model": "mid", "inputs": {"X": "maybe.Y"}},
            {"name": "o", "model": "mid", "inputs": {"X": "maybe.Y"}},
        ],
        {"Y": "m.Y", "O": "o.Y"},
    )
    artifacts = compile_doc(doc_of("p", [maybe, plain("mid")], [alone, then, fan]))
    assert [r.name for r in artifacts.plan.routers] == ["fan__maybe__Y__router"]
    root = tmp_path / "models"
    for name, source in (("maybe", MAYBE), ("mid", PARTIAL)):  # mid: Y = X
        (root / name / "1").mkdir(parents=True)
        shutil.copy(source, root / name / "1" / "model.py")
    with triton(tmp_path, Repository.merge([artifacts]), root) as server:
        for name in ("alone", "then", "fan"):
            requests = [
                Request(name, {"X": np.array([[v]], dtype=np.float32)}, 0, False, False)
                for v in (1.0, -1.0, 2.0)
            ]
            answers = stream(server, requests, quiet=2)
            outputs = {"Y"} | ({"O"} if name == "fan" else set())
            assert answers == {0: [dict.fromkeys(outputs, 1.0)], 1: [], 2: [dict.fromkeys(outputs, 2.0)]}, (
                name
            )
