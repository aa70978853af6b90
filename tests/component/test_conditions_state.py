"""Conditional steps beside streaming and stateful steps, on the real tritonserver (nvidia-pytriton wheel,
CPU; docs/concepts/conditions.md): a branch holding a decoupled step streams every response of the branch
through the orchestrator, and a sequence-batched step behind a condition keeps its state across the
requests of a sequence that take its branch, alternating branches included.

The models are tests/component/test_ensemble_pitfalls.py's: a decoupled model answering each request
twice, X + 1 then X + 2 (tests/triton_models/expand_model.py), a plain one, Y = X
(tests/triton_models/slow_first_model.py, slow for X == 1 only, which no test sends), and the product's
accumulator (TOTAL is the running sum of VALUE within a sequence, START resets it). Expected answers are
worked out from those definitions and docs/concepts/conditions.md."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from component.test_ensemble_pitfalls import SLOW_FIRST, Request, model_root, stream
from component.test_triton_loads import Repository, triton
from helpers import compile_to_serve, doc_of
from support.ensemble_pitfalls import COUNTED, STREAMED, SUMMED, accumulator, expand, plain

pytestmark = pytest.mark.tritonserver


def _x(value: float) -> dict[str, np.ndarray]:
    return {"X": np.array([[value]], dtype=np.float32)}


def _models(tmp_path: Path) -> Path:
    """The models of tests/component/test_ensemble_pitfalls.py, and mid (Y = X)."""
    root = model_root(tmp_path)
    (root / "mid" / "1").mkdir(parents=True)
    shutil.copy(SLOW_FIRST, root / "mid" / "1" / "model.py")
    return root


def test_a_streaming_branch_gives_every_response_and_a_skipped_one_answers_once(tmp_path: Path) -> None:
    """X > 0 takes the branch of the decoupled step: both its responses reach the client, each with the
    head's output too; a request that takes the plain branch, or none, gets one response (the plain
    branch's output, or the default); all on one gRPC stream, sent at once."""
    artifacts = compile_to_serve(doc_of("streams", [expand(), plain("mid")], [STREAMED]))
    requests = [Request("streamed", _x(x), 0, False, False) for x in (2.0, -3.0, 5.0, 0.0)]
    with triton(tmp_path, Repository.merge([artifacts]), _models(tmp_path)) as server:
        answers = stream(server, requests, quiet=2.0)
    assert answers == {
        0: [{"Y": 3.0, "ECHO": 2.0}, {"Y": 4.0, "ECHO": 2.0}],
        1: [{"Y": -3.0, "ECHO": -3.0}],
        2: [{"Y": 6.0, "ECHO": 5.0}, {"Y": 7.0, "ECHO": 5.0}],
        3: [{"Y": 0.0, "ECHO": 0.0}],
    }


# two sequences interleaved on one stream: (sequence ID, X, START, END) -> the TOTAL the client must see
SEQUENCES = [
    # 7: the first request and the others above 0 take the branch: the total of 1, 2, 3; -5 skips it
    ((7, 1.0, True, False), 1.0),
    # 8: its first request skips the branch; the first one that takes it begins the step's sequence
    ((8, -1.0, True, False), -1.0),
    ((7, 2.0, False, False), 3.0),
    ((8, 4.0, False, False), 4.0),
    ((7, -5.0, False, False), -1.0),
    ((8, 10.0, False, False), 14.0),
    ((7, 3.0, False, True), 6.0),
    # 8 ends with a request that skips the branch: the step's sequence stays open...
    ((8, -2.0, False, True), -1.0),
]
# ... until 8 starts again (once it has ended: a client reusing an ID waits for its answers)
AGAIN = [((8, 2.0, True, False), 2.0), ((8, 3.0, False, True), 5.0)]


def test_a_sequence_step_behind_a_condition_keeps_its_state(tmp_path: Path) -> None:
    """The orchestrator takes the sequences itself and passes each request's correlation ID and flags to
    the branch: each sequence's requests that take it reach the accumulator in order, as one sequence
    beginning at the first of them, so the totals run on across skipped requests and stay per sequence;
    a new START begins the step's sequence anew. A sequence step in the head sees every request of the
    sequence, and its running total chooses the branch."""
    artifacts = compile_to_serve(doc_of("counts", [accumulator(), plain("mid")], [COUNTED, SUMMED]))
    with triton(tmp_path, Repository.merge([artifacts]), _models(tmp_path)) as server:
        for sequences in (SEQUENCES, AGAIN):
            requests = [Request("counted", _x(x), sid, start, end) for (sid, x, start, end), _ in sequences]
            answers = stream(server, requests, quiet=2.0)
            assert answers == {k: [{"TOTAL": total}] for k, (_, total) in enumerate(sequences)}
        summed = [Request("summed", _x(x), 9, k == 0, k == 2) for k, x in enumerate((2.0, 3.0, 4.0))]
        answers = stream(server, summed, quiet=2.0)
    assert answers == {
        0: [{"TOTAL": 2.0, "BIG": -1.0}],
        1: [{"TOTAL": 5.0, "BIG": -1.0}],
        2: [{"TOTAL": 9.0, "BIG": 9.0}],
    }
