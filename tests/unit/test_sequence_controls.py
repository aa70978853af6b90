"""Sequence batching as published deployments configure it, rendered: START/END/READY controls of every data
type, implicit states with an initial state, iterative sequences, string correlation IDs kept whole in
the affinity header (and warned about on Python). Served on the real tritonserver:
tests/component/test_sequence_controls.py."""

from __future__ import annotations

from helpers import compile_to_serve
from support.sequence_controls import KINDS, sequence_doc, string_control_doc
from tritonpipeline.client import affinity_headers
from tritonpipeline.compiler.triton_config import mc, parse_text
from tritonpipeline.render import checks
from tritonpipeline.spec import parse_pipeline

CONTROL = mc.ModelSequenceBatching.Control


# --------------------------------------------------------------------------- compiled form


def test_controls_render_with_their_data_types() -> None:
    files = compile_to_serve(sequence_doc()).files
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
    sb = parse_text(compile_to_serve(doc).files["seq_int/config.pbtxt"]).sequence_batching
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


def test_a_string_correlation_id_control_on_python_is_warned_about() -> None:
    (warning,) = [w for w in checks.warnings(parse_pipeline(string_control_doc())) if "correlation" in w.path]
    assert warning.path == "spec.models[1].sequenceBatching.controls.correlationIdDataType"
    assert warning.message == checks.STRING_CORRELATION_ID_ON_PYTHON.format(name="CORRID")
