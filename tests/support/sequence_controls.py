"""What tests/unit/test_sequence_controls.py and tests/component/test_sequence_controls.py share."""

from __future__ import annotations

from typing import Any

from helpers import doc_of, py_model

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


def string_control_doc() -> dict[str, Any]:
    doc = sequence_doc()
    doc["spec"]["models"][1] = sequence_model("seq_fp", "FP32", "STRING")
    doc["spec"]["pipelines"] = []
    return doc
