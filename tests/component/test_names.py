"""Names: every validated name is a full match (no trailing newline slips through a `$`), tensor names
accept what exported models really use, and such names still give Triton-safe router names and a
pipeline that the real tritonserver serves with the right numbers.
Here the tests on real components; the pure ones are in tests/unit/test_names.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import ROUTERS, with_router
from support.names import _exported

ECHO_ADD = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.inp = config["input"][0]["name"]
        self.out = config["output"][0]["name"]
        self.add = float(config["parameters"]["ADD"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, self.inp).as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.out, x + self.add)]))
        return responses
"""


@pytest.mark.tritonserver
@pytest.mark.parametrize("router", ROUTERS)
def test_real_triton_serves_exported_tensor_names(tmp_path: Path, serve_pipeline: Any, router: str) -> None:
    models = tmp_path / "models"
    for name in ("embed", "head_a", "head_b"):
        (models / name / "1").mkdir(parents=True)
        (models / name / "1" / "model.py").write_text(ECHO_ADD)
    server = serve_pipeline(with_router(_exported(models), router))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IMAGE", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("exported", [tensor])
    np.testing.assert_allclose(result.as_numpy("1519"), x + 11)
    np.testing.assert_allclose(result.as_numpy("embed./model/embed/input"), x + 101)


@pytest.mark.tritonserver
@pytest.mark.parametrize("router", ROUTERS)
def test_real_triton_serves_a_dotted_model_name(tmp_path: Path, serve_pipeline: Any, router: str) -> None:
    """A model's name may hold '.' as Triton's directories do (llava-1.5); its step is named."""
    models = tmp_path / "models"
    doc = _exported(models)
    doc["spec"]["models"][1]["name"] = "head-a.v1.5"
    step = doc["spec"]["pipelines"][0]["steps"][1]
    step["name"], step["model"] = "head_a", "head-a.v1.5"
    for name in ("embed", "head-a.v1.5", "head_b"):
        (models / name / "1").mkdir(parents=True)
        (models / name / "1" / "model.py").write_text(ECHO_ADD)
    server = serve_pipeline(with_router(doc, router))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IMAGE", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("exported", [tensor])
    np.testing.assert_allclose(result.as_numpy("1519"), x + 11)  # through head-a.v1.5
    np.testing.assert_allclose(result.as_numpy("embed./model/embed/input"), x + 101)
