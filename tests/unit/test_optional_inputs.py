"""Optional inputs (TensorRT-LLM's ensemble), the compiler's side: they are declared optional in the
ensemble and its router, and an optional input feeding a required model input is refused at `validate`
(rules.OPTIONAL_INPUT_TO_REQUIRED). Why, and the requests served:
tests/component/test_optional_inputs.py."""

from __future__ import annotations

from helpers import compile_to_serve
from support.optional_inputs import llm_doc
from tritonpipeline.compiler import rules
from tritonpipeline.compiler.triton_config import parse_text
from unit.test_spec_errors import problems_of

# --------------------------------------------------------------------------- compiled form


def test_optional_inputs_are_declared_optional_in_the_ensemble_and_its_router() -> None:
    files = compile_to_serve(llm_doc()).files
    ensemble = parse_text(files["ensemble_router/config.pbtxt"])
    assert {i.name: i.optional for i in ensemble.input} == {
        "text_input": False,
        "max_tokens": True,
        "temperature": True,
    }
    (router,) = [parse_text(files[p]) for p in files if p.endswith("__temperature__router/config.pbtxt")]
    assert [i.optional for i in router.input] == [True]
    # Triton cannot size the batch of a request without inputs: the router of an optional input does not
    # batch, and copies the full shape
    assert router.max_batch_size == 0 and list(router.input[0].dims) == [-1, 1]
    preprocessing = parse_text(files["preprocessing/config.pbtxt"])
    assert [i.optional for i in preprocessing.input] == [False, True, True]


def test_an_optional_input_feeding_a_required_one_is_refused_naming_both() -> None:
    doc = llm_doc()
    doc["spec"]["models"][2]["inputs"][1]["optional"] = False  # postprocessing.TEMPERATURE now required
    messages = [f"{p.path}: {p.message}" for p in problems_of(doc)]
    wanted = rules.OPTIONAL_INPUT_TO_REQUIRED.format(
        name="temperature", consumer="postprocessing.TEMPERATURE", model="postprocessing"
    )
    # once per pipeline (router and shared), at the step's mapping
    assert messages == [f"spec.pipelines[{i}].steps[2].inputs.TEMPERATURE: {wanted}" for i in (0, 1)]
