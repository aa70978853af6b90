"""Sequence batching as published deployments configure it: START/END/READY controls as INT32, FP32 or BOOL
values, correlation IDs as numbers or strings (kept whole through a router and the affinity header),
implicit states with an initial state, iterative sequences.

The real-server test serves three sequence models (tests/triton_models/sequence_probe_model.py: TOTAL is
the running sum within a sequence, ID the correlation ID as the model received it, FLAG_TYPE the type of
its START control), each behind a router that also feeds a plain step, and sends interleaved sequences on
one gRPC stream. The expected totals follow from the values sent, the IDs are the ones the client sent.
Here the tests on real components; the pure ones are in tests/unit/test_sequence_controls.py."""

from __future__ import annotations

import queue
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from component.test_triton_loads import GENERIC, Repository, triton
from helpers import compile_to_serve, doc_of
from support.sequence_controls import KINDS, sequence_doc, string_control_doc
from tritonpipeline.client import TritonClient
from tritonpipeline.compiler import rules
from tritonpipeline.local.tritonserver import LocalTriton

PROBE = Path(__file__).resolve().parents[1] / "triton_models" / "sequence_probe_model.py"


SHAPE = [1, 1]  # one item of a batching model


# --------------------------------------------------------------------------- real server


def model_root(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    for name in KINDS:
        (root / name / "1").mkdir(parents=True)
        shutil.copy(PROBE, root / name / "1" / "model.py")
    (root / "copy" / "1").mkdir(parents=True)
    shutil.copy(GENERIC, root / "copy" / "1" / "model.py")
    return root


def interleaved(server: LocalTriton, model: str, ids: tuple[Any, Any]) -> list[tuple[str, float, str]]:
    """Two sequences interleaved on one gRPC stream: a = 1, 2, 3 and b = 10, 20, sent a1 b1 a2 b2 a3.
    Each answer as (ID the model saw, TOTAL, FLAG_TYPE), in the order sent."""
    a, b = ids
    plan = [(a, 1.0, True, False), (b, 10.0, True, False), (a, 2.0, False, False), (b, 20.0, False, True)]
    plan.append((a, 3.0, False, True))
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got = []
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for sequence_id, value, start, end in plan:
            x = grpcclient.InferInput("X" if model.endswith("_pipeline") else "VALUE", SHAPE, "FP32")
            x.set_data_from_numpy(np.full(SHAPE, value, dtype=np.float32))
            client.async_stream_infer(
                model, [x], sequence_id=sequence_id, sequence_start=start, sequence_end=end
            )
            result, error = answers.get(timeout=60)  # one at a time: the order of the answers is known
            assert error is None, f"{model}: {error}"
            got.append(
                (
                    result.as_numpy("ID").reshape(-1)[0].decode(),
                    float(result.as_numpy("TOTAL").reshape(-1)[0]),
                    result.as_numpy("FLAG_TYPE").reshape(-1)[0].decode(),
                )
            )
    finally:
        client.stop_stream()
        client.close()
    return got


@pytest.mark.tritonserver
def test_every_control_type_and_string_ids_are_served(tmp_path: Path) -> None:
    repo = Repository.merge([compile_to_serve(sequence_doc())])
    with triton(tmp_path, repo, model_root(tmp_path)) as server:
        for name, (_, corrid, flag_type) in KINDS.items():
            ids: tuple[Any, Any] = (41, 42) if corrid == "UINT64" else ("user-7/naïve", "user-7/naive")
            a, b = (str(i) for i in ids)
            expected = [(a, 1.0, flag_type), (b, 10.0, flag_type), (a, 3.0, flag_type)]
            expected += [(b, 30.0, flag_type), (a, 6.0, flag_type)]
            for model in (name, f"{name}_pipeline"):  # directly, and through the pipeline's router
                assert interleaved(server, model, ids) == expected, model
        # the client helper puts each string ID in the affinity header (gRPC metadata must be ASCII)
        for protocol in ("grpc", "http"):
            url = server.grpc_url if protocol == "grpc" else server.http_url
            client = TritonClient(url, protocol=protocol)
            got = []
            for sequence_id, value, start, end in (("ß/1 x", 1.0, True, False), ("ß/1 x", 2.0, False, True)):
                x = client.input("X", np.full(SHAPE, value, dtype=np.float32))
                result = client.infer(
                    "seq_fp_pipeline", [x], sequence_id=sequence_id, sequence_start=start, sequence_end=end
                )
                got.append(
                    (result.as_numpy("ID").reshape(-1)[0].decode(), float(result.as_numpy("TOTAL")[0, 0]))
                )
            assert got == [("ß/1 x", 1.0), ("ß/1 x", 3.0)], protocol


@pytest.mark.tritonserver
def test_triton_fails_a_string_correlation_id_control_on_python(tmp_path: Path) -> None:
    """Why the warning exists: the model with a STRING CORRID control loads, and every request fails
    before it runs. If this ever answers, Triton fixed it and the warning can go."""
    repo = Repository.merge([compile_to_serve(string_control_doc())])
    with triton(tmp_path, repo, model_root(tmp_path)) as server:
        try:
            answers = interleaved(server, "seq_fp", ("a", "b"))
        except AssertionError as failed:
            error = str(failed)
        else:
            pytest.fail(f"Triton answered a STRING CORRID control: {answers}; the warning can go")
    assert "unexpected number of string elements 2 for inference input 'CORRID'" in error


ITERATIVE = Path(__file__).resolve().parents[1] / "triton_models" / "iterative_model.py"


@pytest.mark.tritonserver
def test_an_iterative_sequence_is_served(tmp_path: Path) -> None:
    """iterativeSequence: Triton reschedules the request the model hands back, so one request with COUNT 3
    gets the answers 1, 2, 3 (without iterativeSequence the same request fails: checked by hand)."""
    model = {
        "name": "iterate",
        "backend": "python",
        "maxBatchSize": 4,
        "decoupled": True,
        "inputs": [{"name": "COUNT", "dataType": "INT32", "dims": [1]}],
        "outputs": [{"name": "VALUE", "dataType": "INT32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
        "sequenceBatching": {"iterativeSequence": True},
    }
    root = tmp_path / "models"
    (root / "iterate" / "1").mkdir(parents=True)
    shutil.copy(ITERATIVE, root / "iterate" / "1" / "model.py")
    repo = Repository.merge([compile_to_serve(doc_of("iterative", [model], []))])
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with triton(tmp_path, repo, root) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            client.start_stream(callback=lambda result, error: answers.put((result, error)))
            count = grpcclient.InferInput("COUNT", [1, 1], "INT32")
            count.set_data_from_numpy(np.array([[3]], dtype=np.int32))
            client.async_stream_infer("iterate", [count], request_id="r1", enable_empty_final_response=True)
            values = []
            while True:
                result, error = answers.get(timeout=60)
                assert error is None, error
                if result.get_response().outputs:
                    values.append(int(result.as_numpy("VALUE").reshape(-1)[0]))
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
        finally:
            client.stop_stream()
            client.close()
    assert values == [1, 2, 3]


STATE_PROBE = Path(__file__).resolve().parents[1] / "triton_models" / "state_probe_model.py"


@pytest.mark.tritonserver
def test_a_python_model_gets_the_initial_state_but_never_a_kept_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why rules.STATE_WITHOUT_BACKEND_SUPPORT refuses states on Python models, on the real server: rendered
    with the rule off, the initial state (zeroData) reaches the model on every request, and what the model
    writes to OUTPUT_STATE never comes back: one sequence 1, 2, 3 totals 1, 2, 3, not 1, 3, 6. If it ever
    totals 1, 3, 6, the Python backend keeps states and the rule can admit it."""
    model = {
        "name": "acc",
        "backend": "python",
        "maxBatchSize": 0,
        "inputs": [{"name": "VALUE", "dataType": "FP32", "dims": [1]}],
        "outputs": [
            {"name": "TOTAL", "dataType": "FP32", "dims": [1]},
            {"name": "OUTPUT_STATE", "dataType": "FP32", "dims": [1]},
        ],
        "instances": [{"kind": "CPU", "count": 1}],
        "sequenceBatching": {
            "controls": {"start": "START"},
            "states": [
                {
                    "inputName": "INPUT_STATE",
                    "outputName": "OUTPUT_STATE",
                    "dataType": "FP32",
                    "dims": [1],
                    "initialState": {"name": "zero", "dataType": "FP32", "dims": [1], "zeroData": True},
                }
            ],
        },
    }
    doc = doc_of("state", [model], [])
    monkeypatch.setattr(rules.model_rules, "states_kept", lambda spec, i: iter(()))
    repo = Repository.merge([compile_to_serve(doc)])
    root = tmp_path / "models"
    (root / "acc" / "1").mkdir(parents=True)
    shutil.copy(STATE_PROBE, root / "acc" / "1" / "model.py")
    totals = []
    with triton(tmp_path, repo, root) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for k, value in enumerate([1.0, 2.0, 3.0]):
                x = grpcclient.InferInput("VALUE", [1], "FP32")
                x.set_data_from_numpy(np.array([value], dtype=np.float32))
                result = client.infer("acc", [x], sequence_id=5, sequence_start=k == 0, sequence_end=k == 2)
                totals.append(float(result.as_numpy("TOTAL")[0]))
        finally:
            client.close()
    assert totals != [1.0, 3.0, 6.0], (
        "the Python backend kept the state: STATE_WITHOUT_BACKEND_SUPPORT may go"
    )
    assert totals == [1.0, 2.0, 3.0]  # the zero initial state every time (a missing one would give -999)
