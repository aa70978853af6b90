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
Here the tests on real components; the pure ones are in tests/unit/test_ensemble_pitfalls.py."""

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

from component.test_triton_loads import Repository, triton
from helpers import MODELS, ROUTERS, compile_to_serve, doc_of, with_router
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
from tritonpipeline.compiler import rules

EXPAND = Path(__file__).resolve().parents[1] / "triton_models" / "expand_model.py"


PARTIAL = Path(__file__).resolve().parents[1] / "triton_models" / "partial_model.py"


MAYBE = Path(__file__).resolve().parents[1] / "triton_models" / "maybe_model.py"


SLOW_FIRST = Path(__file__).resolve().parents[1] / "triton_models" / "slow_first_model.py"


SEQUENCE = [1.0, 2.0, 3.0]  # one sequence: START with the first request, END with the last


# after: expand answers 1 -> 2, 3; 2 -> 3, 4; 3 -> 4, 5; the accumulator sums all six in one sequence
WHOLE_AFTER = [2.0, 5.0, 8.0, 12.0, 16.0, 21.0]


# before: the accumulator's totals 1, 3, 6, each answered twice by expand (+1, +2)
WHOLE_BEFORE = [2.0, 3.0, 4.0, 5.0, 7.0, 8.0]


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
    before = compile_to_serve(doc_of("before", models, [BEFORE]))
    with monkeypatch.context() as m:
        m.setattr(rules, "sequence_steps_before_decoupled", lambda g: iter(()))
        after = compile_to_serve(doc_of("after", models, [AFTER]))
    with triton(tmp_path, Repository.merge([before, after]), model_root(tmp_path)) as server:
        served = flat(stream(server, one_sequence("before", 41)), "Y")
        broken = flat(stream(server, one_sequence("after", 42)), "TOTAL")
    print(f"\nsequence step first: {served}; after the decoupled step: {broken} (whole: {WHOLE_AFTER})")
    assert served == WHOLE_BEFORE
    assert broken != WHOLE_AFTER, "Triton kept the sequence whole: rules.SEQUENCE_AFTER_DECOUPLED may go"
    # the first request's two responses both carried START: the total restarted at the second
    assert broken[:2] == [2.0, 3.0], broken


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
    artifacts = compile_to_serve(
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


@pytest.mark.tritonserver
def test_order_before_a_sequence_step_on_the_real_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sequence 1, 2, 3 sent back to back through two instances whose first request is slow: with
    preserveOrdering the accumulator's totals are 1, 3, 6; without it (what the compiler refuses, rendered
    with the rule off) the later requests reach the accumulator first and are refused. If that assertion
    ever fails, Triton keeps the order by itself and the refusal can be lifted."""
    kept_models = [slow_first("slow_kept", 2, True), accumulator()]
    kept = compile_to_serve(doc_of("kept", kept_models, [through("kept", "slow_kept")]))
    with monkeypatch.context() as m:
        m.setattr(rules, "steps_before_a_sequence_keep_order", lambda g: iter(()))
        free_models = [slow_first("slow_free", 2, None), accumulator()]
        free = compile_to_serve(doc_of("free", free_models, [through("free", "slow_free")]))
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
    artifacts = compile_to_serve(with_router(doc_of("p", [partial, plain("mid")], [one, two]), router))
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
    artifacts = compile_to_serve(doc_of("p", [partial], [exposed]))
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
    artifacts = compile_to_serve(doc_of("p", [maybe, plain("mid")], [alone, then, fan]))
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
