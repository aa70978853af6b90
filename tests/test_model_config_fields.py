"""Model-configuration fields that published Triton deployments rely on, declared in the spec, rendered as
Triton's own fields and served on the real tritonserver: `reshape` (TensorRT-LLM gives 32 inputs
`reshape: { shape: [] }`), `label_filename` (classification), `format`, `allow_ragged_batch`,
`is_shape_tensor`.

The expected answers follow from Triton's documented semantics and the model's definition
(tests/triton_models/shape_probe_model.py reports the rank of the input it received and scores each item
(v, 2v, 0)), never from the code under test.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from test_triton_loads import Repository, compile_doc, doc_of, triton
from tritonpipeline.compiler.triton_config import mc, parse_text
from tritonpipeline.server import LocalTriton

PROBE = Path(__file__).resolve().parent / "triton_models" / "shape_probe_model.py"
LABELS = ["cat", "dog", "none"]


def probe(name: str, reshape: list[int] | None) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": "IN", "dataType": "FP32", "dims": [1]}
    if reshape is not None:
        tensor["reshape"] = reshape
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [tensor],
        "outputs": [
            {"name": "RANK", "dataType": "INT32", "dims": [1]},
            {"name": "SCORES", "dataType": "FP32", "dims": [3], "labelFilename": "labels.txt"},
        ],
        "instances": [{"kind": "CPU", "count": 1}],
    }


def probe_doc() -> dict[str, Any]:
    pipelines = [
        {
            "name": f"{name}_pipeline",
            "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
            "steps": [{"model": name, "inputs": {"IN": "inputs.X"}}],
            "outputs": [
                {"name": "RANK", "from": f"{name}.RANK"},
                {"name": "SCORES", "from": f"{name}.SCORES"},
            ],
        }
        for name in ("reshaped", "plain")
    ]
    return doc_of("fields", [probe("reshaped", []), probe("plain", None)], pipelines)


def model_root(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    for name in ("reshaped", "plain"):
        (root / name / "1").mkdir(parents=True)
        shutil.copy(PROBE, root / name / "1" / "model.py")
        (root / name / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return root


def infer(server: LocalTriton, model: str, x: np.ndarray, input_name: str, **kwargs: Any) -> Any:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        t = grpcclient.InferInput(input_name, list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        return client.infer(model, [t], client_timeout=30, **kwargs)
    finally:
        client.close()


def test_the_fields_render_as_tritons_own() -> None:
    doc = probe_doc()
    m = doc["spec"]["models"][0]
    m["inputs"][0].update(allowRaggedBatch=True, format="NONE")
    m["outputs"][0]["isShapeTensor"] = True
    config = parse_text(compile_doc(doc).files["reshaped/config.pbtxt"])
    (inp,) = config.input
    assert inp.HasField("reshape") and list(inp.reshape.shape) == []  # present, and empty
    assert inp.allow_ragged_batch and inp.format == mc.ModelInput.FORMAT_NONE
    rank, scores = config.output
    assert rank.is_shape_tensor and not rank.HasField("reshape") and rank.label_filename == ""
    assert scores.label_filename == "labels.txt" and not scores.is_shape_tensor
    plain = parse_text(compile_doc(probe_doc()).files["plain/config.pbtxt"])
    assert not plain.input[0].HasField("reshape")


@pytest.mark.tritonserver
def test_reshape_and_labels_are_served(tmp_path: Path) -> None:
    """`reshape: []` on an input of dims [1]: clients (and pipelines) send [batch, 1], the model receives
    [batch]; without it, [batch, 1]. `label_filename`: the classification extension names the class."""
    x = np.array([[3.0], [5.0]], dtype=np.float32)
    with triton(tmp_path, Repository.merge([compile_doc(probe_doc())]), model_root(tmp_path)) as server:
        for model, rank in (("reshaped", 1), ("plain", 2)):
            for name, input_name in ((model, "IN"), (f"{model}_pipeline", "X")):
                result = infer(server, name, x, input_name)
                assert result.as_numpy("RANK").reshape(-1).tolist() == [rank, rank], name
                np.testing.assert_array_equal(result.as_numpy("SCORES"), [[3, 6, 0], [5, 10, 0]])
            # the top class of each item: score:index:label, dog (2v) for both
            top = infer(
                server, model, x, "IN", outputs=[grpcclient.InferRequestedOutput("SCORES", class_count=1)]
            )
            assert top.as_numpy("SCORES").reshape(-1).tolist() == [b"6.000000:1:dog", b"10.000000:1:dog"]
