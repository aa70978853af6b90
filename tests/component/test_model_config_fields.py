"""Model-configuration fields that published Triton deployments rely on, declared in the spec, rendered as
Triton's own fields and served on the real tritonserver: `reshape` (TensorRT-LLM gives 32 inputs
`reshape: { shape: [] }`), `label_filename` (classification), `format`, `allow_ragged_batch`,
`is_shape_tensor`.

The expected answers follow from Triton's documented semantics and the model's definition
(tests/triton_models/shape_probe_model.py reports the rank of the input it received and scores each item
(v, 2v, 0)), never from the code under test.
Here the tests on real components; the pure ones are in tests/unit/test_model_config_fields.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from component.test_triton_loads import Repository, triton
from helpers import compile_to_serve, doc_of
from support.model_config_fields import POLICIES, probe_doc, versioned
from tritonpipeline.local.tritonserver import LocalTriton

PROBE = Path(__file__).resolve().parents[1] / "triton_models" / "shape_probe_model.py"


LABELS = ["cat", "dog", "none"]


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


@pytest.mark.tritonserver
def test_reshape_and_labels_are_served(tmp_path: Path) -> None:
    """`reshape: []` on an input of dims [1]: clients (and pipelines) send [batch, 1], the model receives
    [batch]; without it, [batch, 1]. `label_filename`: the classification extension names the class."""
    x = np.array([[3.0], [5.0]], dtype=np.float32)
    with triton(tmp_path, Repository.merge([compile_to_serve(probe_doc())]), model_root(tmp_path)) as server:
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


# ------------------------------------------------------------------ queue policy, priorities, versions

ADD_VERSION = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + {version})]
            )
            for r in requests
        ]
"""


@pytest.mark.tritonserver
def test_version_policies_and_priorities_are_served(tmp_path: Path) -> None:
    """Triton loads the versions each policy names, each answers as its directory's model does, and a
    request at either priority level is served."""
    doc = doc_of("versions", [versioned(n, p) for n, (p, _) in POLICIES.items()], [])
    root = tmp_path / "models"
    for name in POLICIES:
        for version in (1, 2):
            (root / name / str(version)).mkdir(parents=True)
            (root / name / str(version) / "model.py").write_text(ADD_VERSION.format(version=version))
    x = np.array([[10.0]], dtype=np.float32)
    with triton(tmp_path, Repository.merge([compile_to_serve(doc)]), root) as server:
        ready = {(m["name"], m.get("version")) for m in server.models() if m.get("state") == "READY"}
        for name, (_, versions) in POLICIES.items():
            assert {v for n, v in ready if n == name} == versions, name
            for version in versions:
                for priority in (1, 2):
                    result = infer(server, name, x, "X", model_version=version, priority=priority)
                    assert result.as_numpy("Y").tolist() == [[10.0 + int(version)]], (name, version)
