"""What tests/unit/test_names.py and tests/component/test_names.py share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- exported tensor names


def _exported(tmp_path: Path | None = None) -> dict[str, Any]:
    """embed (input.1 -> /model/embed/input) fans out to two heads with ONNX/TF-style tensor names.
    Each model adds its ADD parameter: A = x + 1 + 10, B = x + 1 + 100."""

    def model(name: str, inp: str, out: str, add: int) -> dict[str, Any]:
        return {
            "name": name,
            "backend": "python",
            "maxBatchSize": 8,
            "inputs": [{"name": inp, "dataType": "FP32", "dims": [4]}],
            "outputs": [{"name": out, "dataType": "FP32", "dims": [4]}],
            "instances": [{"kind": "CPU", "count": 1}],
            "parameters": {"ADD": add},
        }

    return {
        "apiVersion": "serving.tritonpipeline.io/v1alpha1",
        "kind": "TritonPipeline",
        "metadata": {"name": "exported"},
        "spec": {
            "server": {"gpus": 0},
            "modelRepository": {"uri": str(tmp_path) if tmp_path else "pvc://models/triton"},
            "models": [
                model("embed", "input.1", "/model/embed/input", 1),
                model("head_a", "onnx::Gemm_0", "1234", 10),
                model("head_b", "input:0", "input.1", 100),
            ],
            "pipelines": [
                {
                    "name": "exported",
                    # names Triton allows: ViT's ensemble output `1519`, and an output named like the
                    # ensemble tensor the compiler would give embed's output (`STEP.TENSOR`)
                    "inputs": [{"name": "IMAGE", "dataType": "FP32", "dims": [4]}],
                    "steps": [
                        {"model": "embed", "inputs": {"input.1": "inputs.IMAGE"}},
                        {"model": "head_a", "inputs": {"onnx::Gemm_0": "embed./model/embed/input"}},
                        {"model": "head_b", "inputs": {"input:0": "embed./model/embed/input"}},
                    ],
                    "outputs": [
                        {"name": "1519", "from": "head_a.1234"},
                        {"name": "embed./model/embed/input", "from": "head_b.input.1"},
                    ],
                }
            ],
        },
    }
