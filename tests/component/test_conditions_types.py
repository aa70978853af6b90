"""Each operator of a condition on each kind of tensor it takes, served by the real tritonserver (CPU) on
both backends: the Python orchestrator and the native switch evaluate the same comparisons
(docs/concepts/conditions.md, its operators). One server per backend serves a pipeline per tensor type,
its branch chosen by a pipeline input of that type: `small` where one comparison holds, `large` (two
steps) where the other does, neither otherwise."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from component.test_triton_integration import extractor, head_b, head_c
from helpers import MODELS, ROUTERS, conditional_on_input, example, py_model, with_router

SCAFFOLDING = Path(__file__).resolve().parents[1] / "triton_models"

pytestmark = pytest.mark.tritonserver

IMAGE = np.array([[1.0, 2.0, -0.5, 0.25]], dtype=np.float32)
BIG = (1 << 53) + 1  # beyond a double's integers: compared exactly, not through a float
NAN = float("nan")

# pipeline name -> (input type, the small branch's comparison, the large one's, [(value, branch)])
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], list[tuple[Any, str | None]]]] = {
    "by_int32": (
        "INT32",
        {"in": [1, 3]},
        {"equals": 2},
        [(1, "small"), (3, "small"), (2, "large"), (7, None)],
    ),
    "by_int16": (
        "INT16",
        {"lessThan": 2.5},
        {"greaterThan": 2.5},
        [(2, "small"), (3, "large"), (-300, "small")],
    ),
    "by_int8": (
        "INT8",
        {"lessThan": -100},
        {"greaterThan": 100},
        [(-128, "small"), (127, "large"), (0, None)],
    ),
    "by_int64": (
        "INT64",
        {"lessThan": -5},
        {"greaterThan": (1 << 53) - 1},
        [(BIG, "large"), ((1 << 53) - 1, None), (-6, "small"), (-(1 << 62), "small")],
    ),
    "by_uint8": ("UINT8", {"in": [0, 1]}, {"equals": 200}, [(200, "large"), (1, "small"), (255, None)]),
    "by_uint64": (
        "UINT64",
        {"lessThan": 3},
        {"greaterThan": 10},
        [((1 << 63) + 5, "large"), (2, "small"), (5, None)],
    ),
    "by_bool": ("BOOL", {"equals": False}, {"equals": True}, [(True, "large"), (False, "small")]),
    "by_fp32": (
        "FP32",
        {"lessThan": 0.5},
        {"greaterThan": 0.5},
        [(0.25, "small"), (0.75, "large"), (0.5, None), (NAN, None)],
    ),
    "by_fp16": (
        "FP16",
        {"lessThan": -1.5},
        {"greaterThan": 1.5},
        [(2.0, "large"), (-2.0, "small"), (1.0, None)],
    ),
    "by_fp64": (
        "FP64",
        {"lessThan": -0.001},
        {"greaterThan": 0.001},
        [(0.002, "large"), (-0.002, "small"), (0.0005, None)],
    ),
}


C_IS_1 = {"tensor": "inputs.C", "equals": 1}

# an output of each type the branch (the generic model: ones, "x" for BYTES) writes: its default, dims
TYPED = {
    "B": ("BOOL", False, [1]),
    "U": ("UINT8", 7, [2]),
    "I": ("INT64", -3, [1]),
    "H": ("FP16", 1.5, [2]),
    "D": ("FP64", 0.25, [1]),
    "S": ("BYTES", "none", [1]),
}


def _on_c(name: str, steps: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """A pipeline of IMAGE and an INT32 C (what its `when`s read)."""
    inputs = [
        {"name": "IMAGE", "dataType": "FP32", "dims": [4]},
        {"name": "C", "dataType": "INT32", "dims": [1]},
    ]
    return {"name": name, "inputs": inputs, "steps": steps, "outputs": outputs}


def _typed() -> tuple[dict[str, Any], dict[str, Any]]:
    """A model `typed` (tests/triton_models/generic_model.py) writing TYPED, and a pipeline running it
    where C equals 1, each of its outputs defaulted."""
    model = py_model("typed", 8, {"X": [4]}, {n: (d, d) for n, (_, _, d) in TYPED.items()})
    for output in model["outputs"]:
        output["dataType"] = TYPED[output["name"]][0]
    step = {"name": "typed", "model": "typed", "inputs": {"X": "inputs.IMAGE"}, "when": C_IS_1}
    outputs = [{"name": n, "from": f"typed.{n}", "default": v} for n, (_, v, _) in TYPED.items()]
    return model, _on_c("typed_defaults", [step], outputs)


def _doc(models: Path) -> dict[str, Any]:
    """examples/conditional.yaml's models and `typed` at `models`, a pipeline per case (and one switch on
    INT64)."""
    doc = example("conditional")
    doc["spec"]["modelRepository"]["uri"] = str(models)
    doc["spec"]["pipelines"] = []
    for name, (dtype, small, large, _) in CASES.items():
        pipeline = conditional_on_input("C", dtype, small, large)["spec"]["pipelines"][0]
        doc["spec"]["pipelines"].append({**pipeline, "name": name})
    switched = copy.deepcopy(example("conditional")["spec"]["pipelines"][1])
    switched["name"] = "switch_int64"
    switched["inputs"].append({"name": "C", "dataType": "INT64", "dims": [1]})
    switched["steps"] = switched["steps"][1:]  # no classifier: the input chooses
    switched["switch"] = [
        {
            "tensor": "inputs.C",
            "cases": [{"greaterThan": 10, "steps": ["large"]}, {"in": [11, 1, 2], "steps": ["small"]}],
        }
    ]
    doc["spec"]["pipelines"].append(switched)
    optional = conditional_on_input("C", "INT32", {"equals": 1}, {"equals": 2})["spec"]["pipelines"][0]
    optional["inputs"][-1]["optional"] = True
    doc["spec"]["pipelines"].append({**optional, "name": "by_optional"})
    defaulted = copy.deepcopy(switched)
    defaulted["inputs"][-1]["optional"] = True
    defaulted["switch"][0] = {
        "tensor": "inputs.C",
        "cases": [{"greaterThan": 10, "steps": ["large"]}],
        "default": ["small"],
    }
    doc["spec"]["pipelines"].append({**defaulted, "name": "switch_optional"})
    model, pipeline = _typed()
    doc["spec"]["models"].append(model)
    doc["spec"]["pipelines"].append(pipeline)
    doc["spec"]["pipelines"].append(_fallback())
    doc["spec"]["models"].append(py_model("refuser", 8, {"X": [4]}, {"Y": ([4], [4])}))
    refused = {"name": "r", "model": "refuser", "inputs": {"X": "inputs.IMAGE"}, "when": C_IS_1}
    doc["spec"]["pipelines"].append(_on_c("refused", [refused], [{"name": "Y", "from": "r.Y"}]))
    return doc


def _fallback() -> dict[str, Any]:
    """An output whose branch falls back on an unconditional step's output, itself a pipeline output too
    (the switch reads it under the output's name), and a branch reading that output."""
    c_is_2 = {"tensor": "inputs.C", "equals": 2}
    return _on_c(
        "fallback",
        [
            {"name": "pre", "model": "extractor", "inputs": {"INPUT_A": "inputs.IMAGE"}},
            {
                "name": "large",
                "model": "head_b",
                "inputs": {"FEATS_IN_B": "inputs.IMAGE"},
                "when": c_is_2,
            },
            # the branch reads an unconditional step's output
            {"name": "post", "model": "head_c", "inputs": {"FEATS_IN_C": "pre.FEATS_A"}, "when": c_is_2},
        ],
        [
            {"name": "RESULT", "from": "large.OUTPUT_B", "orFrom": ["pre.FEATS_A"]},
            {"name": "PRE", "from": "pre.FEATS_A"},
            {"name": "SCORE", "from": "post.OUTPUT_C"},
        ],
    )


@pytest.fixture(scope="module", params=ROUTERS)
def router(request: pytest.FixtureRequest) -> str:
    """What serves the conditions: `python` (the orchestrator) or `native` (the switch)."""
    return str(request.param)


@pytest.fixture(scope="module")
def server(router: str, shared_pipeline, models: Path):
    """The doc's server, its conditions served on the module's backend."""
    return shared_pipeline(with_router(_doc(models), router))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's model files (links), the generic model as `typed`, the refusing one as `refuser`."""
    root = tmp_path_factory.mktemp("models")
    for model in MODELS.iterdir():
        (root / model.name).symlink_to(model)
    for model, code in (("typed", "generic_model.py"), ("refuser", "refusing_model.py")):
        (root / model / "1").mkdir(parents=True)
        (root / model / "1" / "model.py").symlink_to(SCAFFOLDING / code)
    return root


def _ask(server, pipeline: str, dtype: str, *values: Any) -> dict[str, np.ndarray]:
    """The pipeline's answer to IMAGE and C, a row of each per value (no value: IMAGE alone)."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        image = httpclient.InferInput("IMAGE", [max(len(values), 1), 4], "FP32")
        image.set_data_from_numpy(np.repeat(IMAGE, max(len(values), 1), axis=0))
        inputs = [image]
        if values:
            array = np.array([[v] for v in values], dtype=_NUMPY[dtype])
            c = httpclient.InferInput("C", [len(values), 1], np_to_triton_dtype(array.dtype))
            c.set_data_from_numpy(array)
            inputs.append(c)
        result = client.infer(pipeline, inputs)
    finally:
        client.close()
    return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


_NUMPY = {
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8,
    "UINT64": np.uint64, "BOOL": np.bool_, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip


@pytest.mark.parametrize(
    ("pipeline", "value", "branch"),
    [(name, value, branch) for name, (_, _, _, probes) in CASES.items() for value, branch in probes],
)
def test_each_operator_on_each_type_chooses_the_branch(server, pipeline: str, value: Any, branch: str | None):
    out = _ask(server, pipeline, CASES[pipeline][0], value)
    if branch is None:  # no branch: RESULT and SCORE left out, SMALL its default
        assert set(out) == {"SMALL"}, f"{pipeline} on {value!r} took a branch"
        np.testing.assert_array_equal(out["SMALL"], np.zeros_like(IMAGE))
    elif branch == "small":
        assert set(out) == {"RESULT", "SMALL"}, f"{pipeline} on {value!r} did not take only the small branch"
        np.testing.assert_allclose(out["RESULT"], extractor(IMAGE))
    else:
        assert set(out) == {"RESULT", "SCORE", "SMALL"}, f"{pipeline} on {value!r} missed the large branch"
        np.testing.assert_allclose(out["RESULT"], head_b(IMAGE))


@pytest.mark.parametrize(("value", "branch"), [(11, "large"), (2, "small"), (10, None), (1 << 62, "large")])
def test_a_switch_takes_its_first_case_that_holds(server, value: int, branch: str | None) -> None:
    """11 is in the second case too: the first that holds wins; no case and no default: neither runs,
    and RESULT (written by the branches only) is left out."""
    out = _ask(server, "switch_int64", "INT64", value)
    if branch is None:
        assert "RESULT" not in out
    else:
        np.testing.assert_allclose(out["RESULT"], head_b(IMAGE) if branch == "large" else extractor(IMAGE))


def test_the_rows_of_one_request_take_one_branch(server) -> None:
    """A request of two rows whose values agree takes their branch with both rows; values that disagree
    are refused with the tensor named, on both backends alike."""
    out = _ask(server, "by_int32", "INT32", 1, 3)  # both in [1, 3]: the small branch
    np.testing.assert_allclose(out["RESULT"], extractor(np.repeat(IMAGE, 2, axis=0)))
    with pytest.raises(
        InferenceServerException, match=r"disagree on the condition on:? inputs\.C"
    ) as refused:
        _ask(server, "by_int32", "INT32", 1, 2)
    assert refused.value.status() == "400"  # the client's request at fault


def test_a_condition_on_an_input_left_out_holds_for_no_value(server) -> None:
    """An optional input the request leaves out: no `when` on it holds (both branches skipped), and a
    switch on it takes its default; given, it chooses as any input."""
    out = _ask(server, "by_optional", "INT32")
    assert set(out) == {"SMALL"}
    np.testing.assert_array_equal(out["SMALL"], np.zeros_like(IMAGE))
    assert set(_ask(server, "by_optional", "INT32", 2)) == {"RESULT", "SCORE", "SMALL"}
    np.testing.assert_allclose(_ask(server, "switch_optional", "INT64")["RESULT"], extractor(IMAGE))
    np.testing.assert_allclose(_ask(server, "switch_optional", "INT64", 12)["RESULT"], head_b(IMAGE))


@pytest.mark.parametrize("taken", [True, False])
def test_each_type_of_default_fills_a_skipped_output(server, taken: bool) -> None:
    """Taken, the branch's own values; skipped, each output's default in its type and shape (the request's
    rows first), from the orchestrator's numpy and from the switch's packed element alike."""
    out = _ask(server, "typed_defaults", "INT32", *([1, 1] if taken else [0, 0]))
    assert set(out) == set(TYPED)
    for name, (data_type, default, dims) in TYPED.items():
        got = out[name]
        assert got.shape == (2, *dims), name
        assert np_to_triton_dtype(got.dtype) == data_type, name
        if data_type == "BYTES":
            assert got.ravel().tolist() == [b"x" if taken else default.encode()] * got.size, name
        else:
            np.testing.assert_array_equal(got, np.full(got.shape, 1 if taken else default), err_msg=name)


@pytest.mark.parametrize(("value", "taken"), [(2, True), (0, False)])
def test_an_output_falls_back_on_an_unconditional_step(server, value: int, taken: bool) -> None:
    out = _ask(server, "fallback", "INT32", value)
    np.testing.assert_allclose(out["PRE"], extractor(IMAGE))
    np.testing.assert_allclose(out["RESULT"], head_b(IMAGE) if taken else extractor(IMAGE))
    if taken:
        np.testing.assert_allclose(out["SCORE"], head_c(extractor(IMAGE)), rtol=1e-6)
    else:
        assert "SCORE" not in out


def test_a_branch_error_reaches_the_client_with_its_code(server, router: str) -> None:
    """IMAGE holds a negative value: the branch's model refuses it (INVALID_ARG); the client gets its
    message and, from the switch, HTTP 400, not a server error. (The orchestrator answers 500: in Triton
    2.51 the Python backend hands a BLS call's error to the model as INTERNAL, whatever its code.)
    Skipped, the branch refuses nothing."""
    with pytest.raises(InferenceServerException, match=r"refused__when0: .*refusing a negative X") as refused:
        _ask(server, "refused", "INT32", 1)
    assert refused.value.status() == ("400" if router == "native" else "500")
    assert "Y" not in _ask(server, "refused", "INT32", 0)
