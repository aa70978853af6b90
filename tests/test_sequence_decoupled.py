"""A sequence-batched step after a decoupled step: Triton cannot keep such a sequence whole, so the
compiler refuses it (rules.SEQUENCE_AFTER_DECOUPLED), by every route; the other order is served right.

The models are real: the product's stateful accumulator (model_repository/accumulator: TOTAL is the running
sum of VALUE within a sequence, START resets it, END forgets it) and a decoupled model that answers each
request twice, X + 1 then X + 2 (tests/triton_models/expand_model.py). Expected answers are what a client
of the declared pipeline must see, worked out from those two definitions, never read from the code.
"""

from __future__ import annotations

import queue
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from helpers import MODELS
from test_spec_errors import problems_of
from test_triton_loads import Repository, compile_doc, doc_of, triton
from tritonpipeline.compiler import rules

EXPAND = Path(__file__).resolve().parent / "triton_models" / "expand_model.py"
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


def stream_sequence(server: Any, model: str, output: str, sequence_id: int, quiet: float = 3.0) -> list[Any]:
    """SEQUENCE as one sequence over a gRPC stream (all requests sent, as a streaming client does); every
    answer in arrival order (a float, or the error's text) until none has come for `quiet` seconds."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    answers: list[Any] = []
    try:
        for k, value in enumerate(SEQUENCE):
            x = grpcclient.InferInput("X", [1, 1], "FP32")
            x.set_data_from_numpy(np.array([[value]], dtype=np.float32))
            client.async_stream_infer(
                model,
                [x],
                sequence_id=sequence_id,
                sequence_start=k == 0,
                sequence_end=k == len(SEQUENCE) - 1,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                result, error = got.get(timeout=quiet)
            except queue.Empty:
                break
            answers.append(str(error) if error is not None else float(result.as_numpy(output).reshape(-1)[0]))
    finally:
        client.stop_stream(cancel_requests=True)  # a request Triton never finishes would hold the stream open
        client.close()
    return answers


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
    root = tmp_path / "models"
    (root / "expand" / "1").mkdir(parents=True)
    shutil.copy(EXPAND, root / "expand" / "1" / "model.py")
    shutil.copytree(MODELS / "accumulator", root / "accumulator")
    with triton(tmp_path, Repository.merge([before, after]), root) as server:
        served = stream_sequence(server, "before", "Y", sequence_id=41)
        broken = stream_sequence(server, "after", "TOTAL", sequence_id=42)
    print(f"\nsequence step first: {served}; after the decoupled step: {broken} (whole: {WHOLE_AFTER})")
    assert served == WHOLE_BEFORE
    assert broken != WHOLE_AFTER, "Triton kept the sequence whole: rules.SEQUENCE_AFTER_DECOUPLED may go"
    # the first request's two responses both carried START: the total restarted at the second
    assert broken[:2] == [2.0, 3.0], broken
