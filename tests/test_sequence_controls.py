"""Sequence batching as published deployments configure it: START/END/READY controls as INT32, FP32 or BOOL
values, correlation IDs as numbers or strings (kept whole through a router and the affinity header),
implicit states with an initial state, iterative sequences.

The real-server test serves three sequence models (tests/triton_models/sequence_probe_model.py: TOTAL is
the running sum within a sequence, ID the correlation ID as the model received it, FLAG_TYPE the type of
its START control), each behind a router that also feeds a plain step, and sends interleaved sequences on
one gRPC stream. The expected totals follow from the values sent, the IDs are the ones the client sent.
"""

from __future__ import annotations

import queue
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from test_triton_loads import GENERIC, Repository, compile_doc, doc_of, py_model, triton
from tritonpipeline.client import TritonClient, affinity_headers
from tritonpipeline.compiler import rules
from tritonpipeline.compiler.triton_config import mc, parse_text
from tritonpipeline.local.tritonserver import LocalTriton
from tritonpipeline.render import checks
from tritonpipeline.spec import parse_pipeline

PROBE = Path(__file__).resolve().parent / "triton_models" / "sequence_probe_model.py"
CONTROL = mc.ModelSequenceBatching.Control
SHAPE = [1, 1]  # one item of a batching model

# model -> (flag data type, correlation ID control type or None for none, the numpy type START arrives as)
KINDS: dict[str, tuple[str, str | None, str]] = {
    "seq_int": ("INT32", "UINT64", "int32"),
    "seq_fp": ("FP32", None, "float32"),  # string IDs: the model reads the request's correlation ID
    "seq_bool": ("BOOL", None, "bool"),
}


def sequence_model(name: str, flags: str, corrid: str | None) -> dict[str, Any]:
    controls: dict[str, Any] = {"start": "START", "end": "END", "ready": "READY", "flagDataType": flags}
    if corrid is not None:
        controls |= {"correlationId": "CORRID", "correlationIdDataType": corrid}
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [{"name": "VALUE", "dataType": "FP32", "dims": [1]}],
        "outputs": [
            {"name": "TOTAL", "dataType": "FP32", "dims": [1]},
            {"name": "ID", "dataType": "BYTES", "dims": [1]},
            {"name": "FLAG_TYPE", "dataType": "BYTES", "dims": [1]},
        ],
        "instances": [{"kind": "CPU", "count": 1}],
        "sequenceBatching": {
            "maxSequenceIdleMicroseconds": 10_000_000,
            "controls": controls,
        },
    }


def sequence_doc() -> dict[str, Any]:
    models = [sequence_model(name, flags, corrid) for name, (flags, corrid, _) in KINDS.items()]
    models.append(py_model("copy", 8, {"X": [1]}, {"Y": ([1], [1])}))
    pipelines = [
        {
            "name": f"{name}_pipeline",
            "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
            # X fans out: a router copies it to the sequence step and to `copy`
            "steps": [
                {"model": name, "inputs": {"VALUE": "inputs.X"}},
                {"model": "copy", "inputs": {"X": "inputs.X"}},
            ],
            "outputs": [
                {"name": "TOTAL", "from": f"{name}.TOTAL"},
                {"name": "ID", "from": f"{name}.ID"},
                {"name": "FLAG_TYPE", "from": f"{name}.FLAG_TYPE"},
                {"name": "Y", "from": "copy.Y"},
            ],
        }
        for name in KINDS
    ]
    return doc_of("sequences", models, pipelines)


# --------------------------------------------------------------------------- compiled form


def test_controls_render_with_their_data_types() -> None:
    files = compile_doc(sequence_doc()).files
    expected_flags = {"INT32": "int32_false_true", "FP32": "fp32_false_true", "BOOL": "bool_false_true"}
    for name, (flags, corrid, _) in KINDS.items():
        sb = parse_text(files[f"{name}/config.pbtxt"]).sequence_batching
        controls = {c.name: c.control[0] for c in sb.control_input}
        for flag in ("START", "END", "READY"):
            control = controls[flag]
            values = [list(getattr(control, f)) for f in expected_flags.values()]
            assert values.count([]) == 2, (name, flag, values)  # exactly one kind of values, false then true
            assert [bool(v) for v in getattr(control, expected_flags[flags])] == [False, True]
        if corrid is not None:
            assert controls["CORRID"].kind == CONTROL.CONTROL_SEQUENCE_CORRID
            assert mc.DataType.Name(controls["CORRID"].data_type) == f"TYPE_{corrid}"
        else:
            assert "CORRID" not in controls
    assert not any(parse_text(files[f"{n}/config.pbtxt"]).sequence_batching.iterative_sequence for n in KINDS)


def test_initial_state_and_iterative_sequence_render() -> None:
    doc = sequence_doc()
    m = doc["spec"]["models"][0]
    del m["backend"]
    m["platform"] = "onnxruntime_onnx"
    m["sequenceBatching"]["iterativeSequence"] = True
    m["sequenceBatching"]["states"] = [
        {
            "inputName": "PAST_IN",
            "outputName": "PAST_OUT",
            "dataType": "FP32",
            "dims": [-1, 16],
            "initialState": {"name": "empty", "dataType": "FP32", "dims": [1, 16], "zeroData": True},
        },
        {
            "inputName": "H_IN",
            "outputName": "H_OUT",
            "dataType": "INT32",
            "dims": [4],
            "initialState": {"name": "h0", "dataType": "INT32", "dims": [4], "dataFile": "h0.bin"},
        },
    ]
    sb = parse_text(compile_doc(doc).files["seq_int/config.pbtxt"]).sequence_batching
    assert sb.iterative_sequence
    zero, from_file = sb.state
    (init,) = zero.initial_state
    assert (init.name, list(init.dims), init.WhichOneof("state_data"), init.zero_data) == (
        "empty",
        [1, 16],
        "zero_data",
        True,
    )
    (init,) = from_file.initial_state
    assert (init.data_type, init.WhichOneof("state_data"), init.data_file) == (
        mc.TYPE_INT32,
        "data_file",
        "h0.bin",
    )


def test_string_ids_travel_whole_in_the_affinity_header() -> None:
    """Header values must be printable ASCII, and HTTP trims spaces at their ends: a string ID is
    percent-encoded, one header value per ID (two IDs never share one)."""
    ids = ["user-42", "user 42 ", "user-42 ", "naïve/β", "a%20b", "a b", "x\ny", 42, "42"]
    values = [affinity_headers(None, "x-triton-sequence-id", i)["x-triton-sequence-id"] for i in ids]
    assert all(v.isascii() and v.isprintable() and v == v.strip() for v in values), values
    assert len(set(values)) == len(ids) - 1  # 42 and "42" are one sequence ID to the header, as to Triton
    assert values[0] == "user-42" and values[-1] == "42"


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
    repo = Repository.merge([compile_doc(sequence_doc())])
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


def string_control_doc() -> dict[str, Any]:
    doc = sequence_doc()
    doc["spec"]["models"][1] = sequence_model("seq_fp", "FP32", "STRING")
    doc["spec"]["pipelines"] = []
    return doc


def test_a_string_correlation_id_control_on_python_is_warned_about() -> None:
    (warning,) = [w for w in checks.warnings(parse_pipeline(string_control_doc())) if "correlation" in w.path]
    assert warning.path == "spec.models[1].sequenceBatching.controls.correlationIdDataType"
    assert warning.message == checks.STRING_CORRELATION_ID_ON_PYTHON.format(name="CORRID")


@pytest.mark.tritonserver
def test_triton_fails_a_string_correlation_id_control_on_python(tmp_path: Path) -> None:
    """Why the warning exists: the model with a STRING CORRID control loads, and every request fails
    before it runs. If this ever answers, Triton fixed it and the warning can go."""
    repo = Repository.merge([compile_doc(string_control_doc())])
    with triton(tmp_path, repo, model_root(tmp_path)) as server:
        try:
            answers = interleaved(server, "seq_fp", ("a", "b"))
        except AssertionError as failed:
            error = str(failed)
        else:
            pytest.fail(f"Triton answered a STRING CORRID control: {answers}; the warning can go")
    assert "unexpected number of string elements 2 for inference input 'CORRID'" in error


ITERATIVE = Path(__file__).resolve().parent / "triton_models" / "iterative_model.py"


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
    repo = Repository.merge([compile_doc(doc_of("iterative", [model], []))])
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


STATE_PROBE = Path(__file__).resolve().parent / "triton_models" / "state_probe_model.py"


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
    repo = Repository.merge([compile_doc(doc)])
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
