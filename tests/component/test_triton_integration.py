"""Compiled pipelines loaded into the real tritonserver (nvidia-pytriton wheel, CPU): numbers checked."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient

from helpers import ROUTERS, example, with_router

pytestmark = pytest.mark.tritonserver

RNG = np.random.default_rng(7)


def infer(server, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensors = []
        for name, array in inputs.items():
            t = httpclient.InferInput(name, list(array.shape), _dtype(array))
            t.set_data_from_numpy(array)
            tensors.append(t)
        result = client.infer(model, tensors)
        return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}
    finally:
        client.close()


def _dtype(array: np.ndarray) -> str:
    return {np.float32: "FP32", np.int32: "INT32"}[array.dtype.type]


# reference arithmetic of the example models (model_repository/*/1/model.py)
def extractor(x):
    return 2 * x + 1


def head_b(f):
    return 3 * f - 2


def head_c(f):
    return f.sum(axis=-1, keepdims=True)


def model_states(server) -> dict[str, str]:
    return {m["name"]: m.get("state", "") for m in server.models()}


@pytest.mark.parametrize(
    ("fan_out", "router"), [("router", "python"), ("router", "native"), ("shared", "python")]
)
def test_fanout_outputs_are_correct(router, shared_pipeline, fan_out):
    doc = example("fanout")
    doc["spec"]["pipelines"][0]["fanOut"] = fan_out
    server = shared_pipeline(with_router(doc, router))
    states = model_states(server)
    routers = [n for n in states if n.endswith("__router")]
    assert len(routers) == (1 if fan_out == "router" else 0)
    assert all(s == "READY" for s in states.values()), states
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    out = infer(server, "vision", {"IMAGE": x})
    feats = extractor(x)
    np.testing.assert_allclose(out["FEATURES"], feats, rtol=1e-6)
    np.testing.assert_allclose(out["SCORE_B"], head_b(feats), rtol=1e-5)
    np.testing.assert_allclose(out["SCORE_C"], head_c(feats), rtol=1e-5)
    assert out["SCORE_C"].shape == (3, 1)


@pytest.mark.parametrize("router", ROUTERS)
def test_diamond_fan_in(router, shared_pipeline):
    server = shared_pipeline(with_router(example("diamond"), router))
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    out = infer(server, "diamond", {"IMAGE": x})
    feats = extractor(x)
    np.testing.assert_allclose(out["RESULT"], head_b(feats) - head_c(feats), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("router", ROUTERS)
def test_pipeline_input_fan_out_gets_a_router(router, shared_pipeline):
    """One pipeline input read by two steps: a router copies it to both."""
    doc = example("fanout")
    pipe = doc["spec"]["pipelines"][0]
    pipe["steps"][1]["inputs"] = {"FEATS_IN_B": "inputs.IMAGE"}
    pipe["outputs"] = [
        {"name": "SCORE_B", "from": "head_b.OUTPUT_B"},
        {"name": "SCORE_C", "from": "head_c.OUTPUT_C"},
    ]
    server = shared_pipeline(with_router(doc, router))
    assert "vision__inputs__IMAGE__router" in model_states(server)
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    out = infer(server, "vision", {"IMAGE": x})
    np.testing.assert_allclose(out["SCORE_B"], head_b(x), rtol=1e-5)
    np.testing.assert_allclose(out["SCORE_C"], head_c(extractor(x)), rtol=1e-5)


@pytest.mark.parametrize("router", ROUTERS)
def test_non_batching_pipeline_dims_include_batch(router, shared_pipeline):
    """maxBatchSize 0 everywhere: dims are full shapes, and -1 matches any size."""
    doc = example("diamond")
    for m in doc["spec"]["models"]:
        m["maxBatchSize"] = 0
        for t in m["inputs"] + m["outputs"]:
            t["dims"] = [-1, *t["dims"]]
    doc["spec"]["pipelines"][0]["inputs"][0]["dims"] = [-1, 4]
    server = shared_pipeline(with_router(doc, router))
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    out = infer(server, "diamond", {"IMAGE": x})
    feats = extractor(x)
    np.testing.assert_allclose(out["RESULT"], head_b(feats) - head_c(feats), rtol=1e-5, atol=1e-5)


def test_interleaved_sequences_keep_their_own_state(shared_pipeline):
    server = shared_pipeline(example("streaming"))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        chunks = {seq: RNG.integers(-50, 50, size=6).astype(np.int32) for seq in (101, 202, 303, 404)}
        totals = {seq: 0.0 for seq in chunks}
        for k in range(6):  # chunk k of every sequence, interleaved
            for seq, values in chunks.items():
                t = grpcclient.InferInput("CHUNK", [1, 1], "INT32")
                t.set_data_from_numpy(values[k].reshape(1, 1))
                result = client.infer(
                    "streaming", [t], sequence_id=seq, sequence_start=(k == 0), sequence_end=(k == 5)
                )
                totals[seq] += 0.5 * float(values[k])
                assert result.as_numpy("TOTAL")[0, 0] == pytest.approx(totals[seq]), (seq, k)
    finally:
        client.close()


def test_concurrent_async_sequences(shared_pipeline):
    server = shared_pipeline(example("streaming"))

    async def run() -> dict[int, list[float]]:
        client = grpcaio.InferenceServerClient(server.grpc_url)
        try:

            async def stream(seq: int, values: np.ndarray) -> list[float]:
                seen = []
                for k, v in enumerate(values):
                    t = grpcaio.InferInput("CHUNK", [1, 1], "INT32")
                    t.set_data_from_numpy(np.array([[v]], dtype=np.int32))
                    r = await client.infer(
                        "streaming",
                        [t],
                        sequence_id=seq,
                        sequence_start=k == 0,
                        sequence_end=k == len(values) - 1,
                    )
                    seen.append(float(r.as_numpy("TOTAL")[0, 0]))
                return seen

            results = await asyncio.gather(*(stream(seq, chunks[seq]) for seq in chunks))
            return dict(zip(chunks, results, strict=True))
        finally:
            await client.close()

    chunks = {1000 + i: RNG.integers(0, 20, size=8).astype(np.int32) for i in range(12)}
    seen = asyncio.run(run())
    for seq, values in chunks.items():
        np.testing.assert_allclose(seen[seq], np.cumsum(values * 0.5), err_msg=f"sequence {seq}")


@pytest.mark.parametrize("router", ROUTERS)
def test_non_batching_step_inside_a_batching_ensemble(router, shared_pipeline):
    """Triton exempts maxBatchSize-0 steps from the ensemble's batch size; their full dims must match."""
    doc = example("diamond")
    join = next(m for m in doc["spec"]["models"] if m["name"] == "join")
    join["maxBatchSize"] = 0
    for t in join["inputs"] + join["outputs"]:
        t["dims"] = [-1, *t["dims"]]
    server = shared_pipeline(with_router(doc, router))
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    out = infer(server, "diamond", {"IMAGE": x})
    feats = extractor(x)
    np.testing.assert_allclose(out["RESULT"], head_b(feats) - head_c(feats), rtol=1e-5, atol=1e-5)


# every data type a client can send, through an inserted router (a pipeline input read by two steps)
ROUTED_VALUES = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 7, 255]], dtype=np.uint8),
    "UINT16": np.array([[0, 7, 65535]], dtype=np.uint16),
    "UINT32": np.array([[0, 7, 2**32 - 1]], dtype=np.uint32),
    "UINT64": np.array([[0, 7, 2**64 - 1]], dtype=np.uint64),
    "INT8": np.array([[-128, 0, 127]], dtype=np.int8),
    "INT16": np.array([[-32768, 0, 32767]], dtype=np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1]], dtype=np.int32),
    "INT64": np.array([[-(2**63), 0, 2**63 - 1]], dtype=np.int64),
    "FP16": np.array([[-1.5, 0.0, 65504.0]], dtype=np.float16),
    "FP32": np.array([[-1.5, 1e-30, 3.4e38]], dtype=np.float32),
    "FP64": np.array([[-1.5, 1e-300, 1.7e308]], dtype=np.float64),
    "BYTES": np.array([[b"", b"caf\xc3\xa9", b"\x00\xff"]], dtype=np.object_),
}


@pytest.mark.parametrize("router", ROUTERS)
def test_router_passes_every_data_type_unchanged(router, shared_pipeline, tmp_path):
    """The router hands each consumer the exact input, for every data type (DLPack on the CPU, numpy
    for BYTES), checked value by value on the real tritonserver."""
    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.spec import parse_pipeline

    models = tmp_path / "models"
    echo = Path(__file__).parents[1] / "models" / "echo"
    doc: dict = {
        "apiVersion": "serving.tritonpipeline.io/v1alpha1",
        "kind": "TritonPipeline",
        "metadata": {"name": "dtypes"},
        "spec": {"modelRepository": {"uri": str(models)}, "models": [], "pipelines": []},
    }
    for dtype in ROUTED_VALUES:
        name = f"echo_{dtype.lower()}"
        shutil.copytree(echo, models / name)
        tensor = {"dataType": dtype, "dims": [3]}
        doc["spec"]["models"].append(
            {
                "name": name,
                "backend": "python",
                "maxBatchSize": 4,
                "inputs": [{"name": "IN", **tensor}],
                "outputs": [{"name": "OUT", **tensor}],
            }
        )
        doc["spec"]["pipelines"].append(
            {
                "name": f"route_{dtype.lower()}",
                "inputs": [{"name": "X", **tensor}],
                "steps": [
                    {"name": "a", "model": name, "inputs": {"IN": "inputs.X"}},
                    {"name": "b", "model": name, "inputs": {"IN": "inputs.X"}},
                ],
                "outputs": [{"name": "A", "from": "a.OUT"}, {"name": "B", "from": "b.OUT"}],
            }
        )
    plan = compile_pipeline(parse_pipeline(doc)).plan
    assert len(plan.routers) == len(ROUTED_VALUES)  # one router per pipeline input read twice
    server = shared_pipeline(with_router(doc, router))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for dtype, value in ROUTED_VALUES.items():
            t = grpcclient.InferInput("X", list(value.shape), dtype)
            t.set_data_from_numpy(value)
            result = client.infer(f"route_{dtype.lower()}", [t])
            for out in ("A", "B"):
                got = result.as_numpy(out)
                assert got.shape == value.shape, (dtype, out)
                assert got.tolist() == value.tolist(), (dtype, out, got)
    finally:
        client.close()


@pytest.mark.parametrize("router", ROUTERS)
def test_router_routes_tensors_whose_names_are_awkward(router, shared_pipeline, tmp_path):
    """Names reach the router through its config, never through its code: model tensor names with quotes,
    a backslash, braces, spaces and non-ASCII, names with '-', ':', a leading '_' and the full 64
    characters. On the real tritonserver the fanned-out tensor arrives unchanged at every consumer and
    at the pipeline output."""
    models = tmp_path / "models"
    echo = Path(__file__).parents[1] / "models" / "echo"
    tensor = {"dataType": "FP32", "dims": [4]}
    names = ("_ex-tract0r", "h" * 64, "c_model-0")
    quoted = "feats \"{i}\" 'q' \\ {{}} é:0"  # a tensor name Python code could not hold unescaped
    for name in names:
        shutil.copytree(echo, models / name)
    doc: dict = {
        "apiVersion": "serving.tritonpipeline.io/v1alpha1",
        "kind": "TritonPipeline",
        "metadata": {"name": "awkward"},
        "spec": {
            "modelRepository": {"uri": str(models)},
            "models": [
                {
                    "name": name,
                    "backend": "python",
                    "maxBatchSize": 8,
                    "inputs": [{"name": f"in-{i}:x", **tensor}],
                    "outputs": [{"name": quoted.format(i=i), **tensor}],
                }
                for i, name in enumerate(names)
            ],
            "pipelines": [
                {
                    "name": "vision-v2_" + "x" * 54,
                    "inputs": [{"name": "IMAGE:0", **tensor}],
                    "steps": [
                        {"name": "_-", "model": names[0], "inputs": {"in-0:x": "inputs.IMAGE:0"}},
                        {"name": "b", "model": names[1], "inputs": {"in-1:x": "_-." + quoted.format(i=0)}},
                        {"name": "c-", "model": names[2], "inputs": {"in-2:x": "_-." + quoted.format(i=0)}},
                    ],
                    "outputs": [
                        {"name": "F-1", "from": "_-." + quoted.format(i=0)},
                        {"name": "B_b", "from": "b." + quoted.format(i=1)},
                        {"name": "C:c", "from": "c-." + quoted.format(i=2)},
                    ],
                }
            ],
        },
    }
    server = shared_pipeline(with_router(doc, router))
    assert sum(n.endswith("__router") for n in model_states(server)) == 1
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    out = infer(server, "vision-v2_" + "x" * 54, {"IMAGE:0": x})
    assert sorted(out) == ["B_b", "C:c", "F-1"]
    for name in out:
        np.testing.assert_array_equal(out[name], x, err_msg=name)
