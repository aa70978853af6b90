"""Optional inputs, as TensorRT-LLM's ensemble uses them (32 of its 34 inputs are optional, and NVIDIA's own
client sends five): a pipeline input marked optional may be left out of a request, a model input marked
optional may be left unmapped by its step, and the steps after an optional input that is left out run
without it, also when a router copies it to several steps.

Triton's own rule is checked at run time only: it loads an ensemble whose optional input feeds a required
model input and fails every request that leaves the input out at that step. The compiler refuses such a
pipeline at `validate` (rules.OPTIONAL_INPUT_TO_REQUIRED); the first test shows why on the real server.

The models are tests/triton_models/present_model.py: each output is the sum of 2**i over the inputs i
(positions in the model's configuration) that the request carried, so the expected answers below follow
from the pipeline's mappings alone.
Here the tests on real components; the pure ones are in tests/unit/test_optional_inputs.py."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from component.test_triton_loads import Repository, triton
from helpers import ROUTERS, compile_to_serve, doc_of, with_router
from support.optional_inputs import MODELS, llm_doc, llm_pipeline
from tritonpipeline.compiler import rules
from tritonpipeline.local.tritonserver import LocalTriton

PRESENT = Path(__file__).resolve().parents[1] / "triton_models" / "present_model.py"


def model_root(tmp_path: Path, names: list[str]) -> Path:
    root = tmp_path / "models"
    for name in names:
        (root / name / "1").mkdir(parents=True)
        shutil.copy(PRESENT, root / name / "1" / "model.py")
    return root


def ask(server: LocalTriton, model: str, names: list[str], batch: int = 2) -> dict[str, list[float]]:
    """One request carrying only `names` (FP32 [batch, 1]); output -> its values, one per item."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inputs = []
        for name in names:
            t = grpcclient.InferInput(name, [batch, 1], "FP32")
            t.set_data_from_numpy(np.ones((batch, 1), dtype=np.float32))
            inputs.append(t)
        result = client.infer(model, inputs, client_timeout=30)
        return {o.name: result.as_numpy(o.name).reshape(-1).tolist() for o in result.get_response().outputs}
    finally:
        client.close()


# --------------------------------------------------------------------------- real server


@pytest.mark.tritonserver
def test_triton_fails_the_request_when_an_optional_input_feeds_a_required_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the rule exists: rendered with the rule switched off, the pipeline loads, and a request that
    leaves `temperature` out fails at postprocessing. If this ever answers, Triton fills such inputs and the
    rule can go."""
    doc = doc_of("llm", copy.deepcopy(MODELS), [llm_pipeline("router")])
    doc["spec"]["models"][2]["inputs"][1]["optional"] = False
    monkeypatch.setattr(rules, "optional_inputs_stay_optional", lambda g: iter(()))
    repo = Repository.merge([compile_to_serve(doc)])
    with triton(tmp_path, repo, model_root(tmp_path, [m["name"] for m in MODELS])) as server:
        assert ask(server, "ensemble_router", ["text_input", "temperature"])["text_output"] == [3.0, 3.0]
        with pytest.raises(Exception, match="postprocessing") as info:
            ask(server, "ensemble_router", ["text_input"])
    assert "TEMPERATURE" in str(info.value)


# sent inputs -> expected code per output
REQUESTS: list[tuple[list[str], dict[str, float]]] = [
    # every input: preprocessing sees QUERY and REQUEST_OUTPUT_LEN (1 + 2; BAD_WORDS is never mapped),
    # tensorrt_llm and postprocessing their input and temperature (1 + 2)
    (["text_input", "max_tokens", "temperature"], {"pre": 3.0, "llm": 3.0, "text_output": 3.0}),
    # only what a client needs: every optional input left out, each step runs on its required input
    (["text_input"], {"pre": 1.0, "llm": 1.0, "text_output": 1.0}),
    # temperature only: both of its steps get it, through the router too
    (["text_input", "temperature"], {"pre": 1.0, "llm": 3.0, "text_output": 3.0}),
    (["text_input", "max_tokens"], {"pre": 3.0, "llm": 1.0, "text_output": 1.0}),
]


@pytest.mark.tritonserver
@pytest.mark.parametrize("router", ROUTERS)
def test_requests_leaving_optional_inputs_out_are_served(router: str, tmp_path: Path) -> None:
    repo = Repository.merge([compile_to_serve(with_router(llm_doc(), router))])
    wrong = {}
    with triton(tmp_path, repo, model_root(tmp_path, [m["name"] for m in MODELS])) as server:
        for sent, expected in REQUESTS:
            for name in ("ensemble_router", "ensemble_shared"):
                got = ask(server, name, sent)
                if got != {k: [v, v] for k, v in expected.items()}:
                    wrong[(name, *sent)] = got
    assert not wrong, wrong
