"""Compiler output: deterministic, schema-valid Triton configs, correct routers, one writer per tensor."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import yaml
from tritonclient.grpc import model_config_pb2 as mc

from helpers import EXAMPLES, example
from tritonpipeline.compiler import Artifacts, compile_pipeline
from tritonpipeline.compiler.triton_config import parse_text, to_text
from tritonpipeline.spec import parse_pipeline
from tritonpipeline.spec import parse_text as parse_spec_text

EXAMPLE_NAMES = ("diamond", "fanout", "streaming")

GPU, CPU = mc.ModelInstanceGroup.KIND_GPU, mc.ModelInstanceGroup.KIND_CPU
CONTROL = mc.ModelSequenceBatching.Control


def compile_to_serve(doc: dict[str, Any], *, cpu_only: bool = False) -> Artifacts:
    return compile_pipeline(parse_pipeline(doc), cpu_only=cpu_only)


def configs(artifacts: Artifacts) -> dict[str, mc.ModelConfig]:
    """Every generated config.pbtxt, parsed back through Triton's schema, by model directory."""
    out = {}
    for path, data in artifacts.files.items():
        if path.endswith("/config.pbtxt"):
            out[path.split("/", 1)[0]] = parse_text(data)
    return out


def ensembles(artifacts: Artifacts) -> dict[str, mc.ModelConfig]:
    return {n: c for n, c in configs(artifacts).items() if c.platform == "ensemble"}


def routers(artifacts: Artifacts) -> dict[str, mc.ModelConfig]:
    return {n: c for n, c in configs(artifacts).items() if n in {r.name for r in artifacts.plan.routers}}


def dtype(name: str) -> int:
    return mc.DataType.Value("TYPE_STRING" if name in ("BYTES", "STRING") else f"TYPE_{name}")


def reorder(value: Any) -> Any:
    """The same document with every mapping's keys in reverse order (lists keep their order)."""
    if isinstance(value, dict):
        return {k: reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(v) for v in value]
    return value


def input_fanout_doc() -> dict[str, Any]:
    """One pipeline input feeds two steps directly (no producing step in between)."""
    doc = example("fanout")
    p = doc["spec"]["pipelines"][0]
    p["steps"] = [
        {"model": "head_b", "inputs": {"FEATS_IN_B": "inputs.IMAGE"}},
        {"model": "head_c", "inputs": {"FEATS_IN_C": "inputs.IMAGE"}},
    ]
    p["outputs"] = [
        {"name": "SCORE_B", "from": "head_b.OUTPUT_B"},
        {"name": "SCORE_C", "from": "head_c.OUTPUT_C"},
    ]
    doc["spec"]["models"] = doc["spec"]["models"][1:]
    return doc


def unusual_names_doc() -> dict[str, Any]:
    """Valid but awkward names: '-', ':', '.', leading '_', the full 64 characters."""
    doc = example("fanout")
    m = doc["spec"]["models"]
    m[0]["name"] = "_ex-tract0r"
    m[0]["outputs"][0]["name"] = "feats.a:0"
    m[1]["name"] = "h" * 64
    p = doc["spec"]["pipelines"][0]
    p["name"] = "vision-v2_" + "x" * 54  # 64 characters
    p["inputs"][0]["name"] = "IMAGE:0"
    p["steps"] = [
        {"name": "_-", "model": "_ex-tract0r", "inputs": {"INPUT_A": "inputs.IMAGE:0"}},
        {"name": "b", "model": "h" * 64, "inputs": {"FEATS_IN_B": "_-.feats.a:0"}},
        {"model": "head_c", "inputs": {"FEATS_IN_C": "_-.feats.a:0"}},
    ]
    p["outputs"] = [
        {"name": "F-1", "from": "_-.feats.a:0"},
        {"name": "SCORE_B", "from": "b.OUTPUT_B"},
        {"name": "SCORE_C", "from": "head_c.OUTPUT_C"},
    ]
    return doc


def step_named_like_router_doc() -> dict[str, Any]:
    """A step whose name is what the router for `s.T` would be called, writing `<that name>.OUTPUT_0`."""
    return yaml.safe_load(
        """
apiVersion: serving.tritonpipeline.io/v1alpha1
kind: TritonPipeline
metadata: {name: p}
spec:
  modelRepository: {uri: pvc://claim/models}
  models:
    - {name: a, backend: python, maxBatchSize: 4,
       inputs: [{name: X, dataType: FP32, dims: [2]}], outputs: [{name: T, dataType: FP32, dims: [2]}]}
    - {name: b, backend: python, maxBatchSize: 4,
       inputs: [{name: X, dataType: FP32, dims: [2]}], outputs: [{name: OUTPUT_0, dataType: FP32, dims: [2]}]}
  pipelines:
    - name: p
      inputs: [{name: IN, dataType: FP32, dims: [2]}]
      steps:
        - {name: s, model: a, inputs: {X: inputs.IN}}
        - {name: p__s__T__router, model: b, inputs: {X: s.T}}
        - {name: c, model: a, inputs: {X: p__s__T__router.OUTPUT_0}}
      outputs: [{name: O1, from: s.T}, {name: O2, from: c.T}]
"""
    )


def shared_doc() -> dict[str, Any]:
    doc = example("fanout")
    doc["spec"]["pipelines"][0]["fanOut"] = "shared"
    return doc


def _with_fan_out(doc: dict[str, Any], mode: str) -> dict[str, Any]:
    doc["spec"]["pipelines"][0]["fanOut"] = mode
    return doc


ALL_DOCS = {
    **{name: (lambda n=name: example(n)) for name in EXAMPLE_NAMES},
    "fanout-shared": shared_doc,
    "input-fanout": input_fanout_doc,
    "input-fanout-shared": lambda: _with_fan_out(input_fanout_doc(), "shared"),
    "unusual-names": unusual_names_doc,
    "step-named-like-router": step_named_like_router_doc,
}


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_same_cr_compiles_to_identical_bytes(name: str) -> None:
    first = compile_to_serve(example(name))
    second = compile_to_serve(example(name))
    assert first.files == second.files
    assert list(first.files) == list(second.files)
    assert first.digest() == second.digest()


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_reordered_mapping_compiles_to_identical_bytes(name: str) -> None:
    doc = example(name)
    shuffled = reorder(doc)
    assert list(shuffled) != list(doc)  # the reordering really happened
    assert list(shuffled["spec"]["models"][0]) != list(doc["spec"]["models"][0])
    a, b = compile_to_serve(doc), compile_to_serve(shuffled)
    assert a.files == b.files
    assert a.digest() == b.digest()


def test_reordered_yaml_text_compiles_to_identical_bytes() -> None:
    text = (EXAMPLES / "fanout.yaml").read_text()
    resorted = yaml.safe_dump(yaml.safe_load(text), sort_keys=True)
    assert resorted != text
    (a,) = parse_spec_text(text)
    (b,) = parse_spec_text(resorted)
    assert compile_pipeline(a).digest() == compile_pipeline(b).digest()


def test_digest_changes_with_the_spec() -> None:
    base = compile_to_serve(example("fanout"))
    doc = example("fanout")
    doc["spec"]["models"][1]["maxBatchSize"] = 4
    assert compile_to_serve(doc).digest() != base.digest()
    doc = example("fanout")
    doc["spec"]["models"][0]["parameters"] = {"k": "v"}
    assert compile_to_serve(doc).digest() != base.digest()


def test_parameters_are_emitted_in_a_stable_order() -> None:
    doc = example("diamond")
    doc["spec"]["models"][0]["parameters"] = {"zeta": 1, "alpha": True, "mid": 0.5}
    shuffled = example("diamond")
    shuffled["spec"]["models"][0]["parameters"] = {"mid": 0.5, "alpha": True, "zeta": 1}
    a, b = compile_to_serve(doc), compile_to_serve(shuffled)
    assert a.files["extractor/config.pbtxt"] == b.files["extractor/config.pbtxt"]
    params = parse_text(a.files["extractor/config.pbtxt"]).parameters
    assert {k: v.string_value for k, v in params.items()} == {"zeta": "1", "alpha": "true", "mid": "0.5"}


# --------------------------------------------------------------------------- schema round trip


@pytest.mark.parametrize("name", list(ALL_DOCS))
def test_every_config_parses_back_and_round_trips(name: str) -> None:
    artifacts = compile_to_serve(ALL_DOCS[name]())
    pbtxts = [p for p in artifacts.files if p.endswith("config.pbtxt")]
    assert pbtxts
    for path in pbtxts:
        data = artifacts.files[path]
        config = parse_text(data)
        assert config.name == path.split("/", 1)[0]
        # re-serialising gives the same bytes: nothing (such as a duplicate map key) was dropped
        assert to_text(config) == data, path


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_model_configs_match_the_spec(name: str) -> None:
    doc = example(name)
    parsed = configs(compile_to_serve(doc))
    for m in doc["spec"]["models"]:
        cfg = parsed[m["name"]]
        assert cfg.backend == m["backend"]
        assert cfg.max_batch_size == m["maxBatchSize"]
        got_in = [(t.name, t.data_type, list(t.dims)) for t in cfg.input]
        assert got_in == [(t["name"], dtype(t["dataType"]), t["dims"]) for t in m["inputs"]]
        got_out = [(t.name, t.data_type, list(t.dims)) for t in cfg.output]
        assert got_out == [(t["name"], dtype(t["dataType"]), t["dims"]) for t in m["outputs"]]
        wanted_groups = [(i["kind"], i.get("count", 1)) for i in m.get("instances", [])]
        if doc["spec"]["server"].get("gpus", 1) == 0:
            wanted_groups = [("CPU" if k == "GPU" else k, c) for k, c in wanted_groups]
        got_groups = [
            (mc.ModelInstanceGroup.Kind.Name(g.kind).removeprefix("KIND_"), g.count)
            for g in cfg.instance_group
        ]
        assert got_groups == wanted_groups


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_ensemble_interface_matches_the_pipeline(name: str) -> None:
    doc = example(name)
    ens = ensembles(compile_to_serve(doc))
    p = doc["spec"]["pipelines"][0]
    cfg = ens[p["name"]]
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.input] == [
        (i["name"], dtype(i["dataType"]), i["dims"]) for i in p["inputs"]
    ]
    models = {m["name"]: m for m in doc["spec"]["models"]}
    steps = {s.get("name", s["model"]): models[s["model"]] for s in p["steps"]}
    wanted = []
    for o in p["outputs"]:
        step_name, tensor = o["from"].split(".", 1)
        (t,) = [t for t in steps[step_name]["outputs"] if t["name"] == tensor]
        wanted.append((o["name"], dtype(t["dataType"]), t["dims"]))
    assert [(t.name, t.data_type, list(t.dims)) for t in cfg.output] == wanted


def test_dynamic_batching_config() -> None:
    cfg = configs(compile_to_serve(example("fanout")))["extractor"]
    assert cfg.HasField("dynamic_batching")
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert not configs(compile_to_serve(example("fanout")))["head_b"].HasField("dynamic_batching")


def test_platform_models_and_decoupled_policy() -> None:
    doc = example("diamond")
    m = doc["spec"]["models"][1]
    del m["backend"]
    m["platform"] = "onnxruntime_onnx"
    doc["spec"]["models"][0]["decoupled"] = True  # upstream of the fan-out: one decoupled origin
    parsed = configs(compile_to_serve(doc))
    assert parsed["head_b"].platform == "onnxruntime_onnx" and parsed["head_b"].backend == ""
    assert parsed["extractor"].model_transaction_policy.decoupled is True
    assert parsed["head_b"].model_transaction_policy.decoupled is False


# --------------------------------------------------------------------------- routers


def _step_by_model(cfg: mc.ModelConfig, model: str) -> Any:
    (s,) = [s for s in cfg.ensemble_scheduling.step if s.model_name == model]
    return s


def test_fanout_example_gets_exactly_one_router_covering_every_consumer() -> None:
    artifacts = compile_to_serve(example("fanout"))
    (router,) = artifacts.plan.routers
    assert router.source == "extract.FEATS_A"
    assert sorted(c.label for _, c in router.outputs) == [
        "head_b.FEATS_IN_B",
        "head_c.FEATS_IN_C",
        "outputs.FEATURES",
    ]
    ens = ensembles(artifacts)["vision"]
    (rstep,) = [s for s in ens.ensemble_scheduling.step if s.model_name == router.name]
    extract = _step_by_model(ens, "extractor")
    # the router reads exactly what the extractor writes
    assert dict(rstep.input_map) == {"INPUT": extract.output_map["FEATS_A"]}
    routed = set(rstep.output_map.values())
    assert len(routed) == 3
    assert _step_by_model(ens, "head_b").input_map["FEATS_IN_B"] in routed
    assert _step_by_model(ens, "head_c").input_map["FEATS_IN_C"] in routed
    assert "FEATURES" in routed
    # the two heads read different router outputs
    assert (
        _step_by_model(ens, "head_b").input_map["FEATS_IN_B"]
        != _step_by_model(ens, "head_c").input_map["FEATS_IN_C"]
    )
    # the router's own config has one output per routed tensor, typed like FEATS_A (FP32 [4])
    rcfg = routers(artifacts)[router.name]
    assert [i.name for i in rcfg.input] == ["INPUT"]
    assert sorted(o.name for o in rcfg.output) == sorted(rstep.output_map)
    for t in [*rcfg.input, *rcfg.output]:
        assert (t.data_type, list(t.dims)) == (mc.TYPE_FP32, [4])
    assert rcfg.max_batch_size == 8
    assert f"{router.name}/1/model.py" in artifacts.files


def test_diamond_router_feeds_both_branches() -> None:
    artifacts = compile_to_serve(example("diamond"))
    (router,) = artifacts.plan.routers
    assert sorted(c.label for _, c in router.outputs) == ["left.FEATS_IN_B", "right.FEATS_IN_C"]


def test_shared_fanout_has_no_router_and_maps_one_tensor_to_several_inputs() -> None:
    artifacts = compile_to_serve(shared_doc())
    assert artifacts.plan.routers == ()
    assert not [p for p in artifacts.files if "router" in p or p.endswith("model.py")]
    ens = ensembles(artifacts)["vision"]
    assert len(ens.ensemble_scheduling.step) == 3
    written = _step_by_model(ens, "extractor").output_map["FEATS_A"]
    assert _step_by_model(ens, "head_b").input_map["FEATS_IN_B"] == written
    assert _step_by_model(ens, "head_c").input_map["FEATS_IN_C"] == written
    assert written == "FEATURES"  # the tensor is also the pipeline output, under that one name


def test_a_step_calls_the_version_it_names_and_the_others_the_latest() -> None:
    doc = example("diamond")
    doc["spec"]["pipelines"][0]["steps"][1]["version"] = 2
    ens = ensembles(compile_to_serve(doc))["diamond"]
    versions = {s.model_name: s.model_version for s in ens.ensemble_scheduling.step}
    assert versions.pop("head_b") == 2
    assert set(versions.values()) == {-1}  # the other steps and the router: Triton's "latest"


def test_pipeline_input_fanout_gets_a_router() -> None:
    artifacts = compile_to_serve(input_fanout_doc())
    (router,) = artifacts.plan.routers
    assert router.source == "inputs.IMAGE"
    ens = ensembles(artifacts)["vision"]
    (rstep,) = [s for s in ens.ensemble_scheduling.step if s.model_name == router.name]
    assert dict(rstep.input_map) == {"INPUT": "IMAGE"}
    b = _step_by_model(ens, "head_b").input_map["FEATS_IN_B"]
    c = _step_by_model(ens, "head_c").input_map["FEATS_IN_C"]
    assert {b, c} == set(rstep.output_map.values())
    assert "IMAGE" not in (b, c)


def test_single_consumer_gets_no_router() -> None:
    artifacts = compile_to_serve(example("streaming"))
    assert artifacts.plan.routers == ()
    ens = ensembles(artifacts)["streaming"]
    deq = _step_by_model(ens, "dequantize")
    acc = _step_by_model(ens, "accumulator")
    assert acc.input_map["VALUE"] == deq.output_map["VALUE"]
    assert acc.output_map["TOTAL"] == "TOTAL"


def test_router_config_keeps_gpu_tensors_on_gpu() -> None:
    artifacts = compile_to_serve(example("fanout"))  # gpus: 1, neighbours have GPU instances
    (rcfg,) = routers(artifacts).values()
    assert rcfg.backend == "python"
    assert rcfg.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"
    assert [(g.kind, g.count) for g in rcfg.instance_group] == [(GPU, 1)]


def test_router_runs_on_cpu_under_cpu_only() -> None:
    artifacts = compile_to_serve(example("fanout"), cpu_only=True)
    (rcfg,) = routers(artifacts).values()
    assert [g.kind for g in rcfg.instance_group] == [CPU]
    assert rcfg.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"


def test_router_runs_on_cpu_when_no_neighbour_uses_a_gpu() -> None:
    doc = example("fanout")
    for m in doc["spec"]["models"]:
        m["instances"] = [{"kind": "CPU", "count": 2}]
    (rcfg,) = routers(compile_to_serve(doc)).values()
    assert [g.kind for g in rcfg.instance_group] == [CPU]


def test_router_on_gpu_when_only_one_consumer_is_on_gpu() -> None:
    doc = example("fanout")
    doc["spec"]["models"][0]["instances"] = [{"kind": "CPU"}]  # producer
    doc["spec"]["models"][1]["instances"] = [{"kind": "CPU"}]  # head_b
    # head_c keeps its GPU instance
    (rcfg,) = routers(compile_to_serve(doc)).values()
    assert [g.kind for g in rcfg.instance_group] == [GPU]


def test_server_without_gpus_turns_gpu_groups_into_cpu() -> None:
    doc = example("fanout")
    doc["spec"]["server"]["gpus"] = 0
    doc["spec"]["models"][0]["instances"] = [{"kind": "GPU", "count": 2, "gpus": [0, 1]}]
    parsed = configs(compile_to_serve(doc))
    groups = [g for cfg in parsed.values() for g in cfg.instance_group]
    assert groups and all(g.kind == CPU for g in groups)
    extractor = parsed["extractor"].instance_group[0]
    assert (extractor.count, list(extractor.gpus)) == (2, [])
    # and the same spec with GPUs keeps them, gpu ids included
    doc["spec"]["server"]["gpus"] = 2
    extractor = configs(compile_to_serve(doc))["extractor"].instance_group[0]
    assert (extractor.kind, list(extractor.gpus)) == (GPU, [0, 1])


def test_cpu_only_keeps_cpu_and_auto_groups() -> None:
    doc = example("fanout")
    doc["spec"]["models"][1]["instances"] = [{"kind": "AUTO", "count": 3}, {"kind": "CPU"}]
    cfg = configs(compile_to_serve(doc, cpu_only=True))["head_b"]
    assert [(g.kind, g.count) for g in cfg.instance_group] == [(mc.ModelInstanceGroup.KIND_AUTO, 3), (CPU, 1)]


def test_router_name_is_a_safe_model_name_for_awkward_tensor_names() -> None:
    """The router's name is a model directory name: only [A-Za-z0-9_-] and at most 100 characters even
    though its source tensor has '.' and ':' (tests/component/test_triton_integration.py serves such a
    router)."""
    artifacts = compile_to_serve(unusual_names_doc())
    (router,) = artifacts.plan.routers
    assert all(ch.isalnum() or ch in "_-" for ch in router.name)
    assert len(router.name) <= 100
    assert f"{router.name}/1/model.py" in artifacts.files


def test_router_names_do_not_clash_with_models() -> None:
    doc = example("fanout")
    # a declared model already carries the name the router would get
    doc["spec"]["models"].append(
        {
            "name": "vision__extract__FEATS_A__router",
            "backend": "python",
            "maxBatchSize": 8,
            "inputs": [{"name": "X", "dataType": "FP32", "dims": [4]}],
            "outputs": [{"name": "Y", "dataType": "FP32", "dims": [4]}],
        }
    )
    artifacts = compile_to_serve(doc)
    (router,) = artifacts.plan.routers
    assert router.name != "vision__extract__FEATS_A__router"
    assert router.name in {s.model_name for s in ensembles(artifacts)["vision"].ensemble_scheduling.step}
    assert len({*artifacts.models, router.name, "vision"}) == len(artifacts.models) + 2


def test_router_names_differ_across_pipelines() -> None:
    doc = example("fanout")
    second = copy.deepcopy(doc["spec"]["pipelines"][0])
    second["name"] = "vision2"
    doc["spec"]["pipelines"].append(second)
    artifacts = compile_to_serve(doc)
    names = [r.name for r in artifacts.plan.routers]
    assert len(names) == 2 and len(set(names)) == 2
    assert set(ensembles(artifacts)) == {"vision", "vision2"}


# --------------------------------------------------------------------------- sequence batching


def test_streaming_sequence_batching_config() -> None:
    cfg = configs(compile_to_serve(example("streaming")))["accumulator"]
    sb = cfg.sequence_batching
    assert sb.WhichOneof("strategy_choice") == "direct"
    assert sb.max_sequence_idle_microseconds == 5_000_000
    controls = {c.name: c.control for c in sb.control_input}
    assert set(controls) == {"START", "END", "CORRID"}
    assert [c.kind for c in controls["START"]] == [CONTROL.CONTROL_SEQUENCE_START]
    assert [c.kind for c in controls["END"]] == [CONTROL.CONTROL_SEQUENCE_END]
    assert [c.kind for c in controls["CORRID"]] == [CONTROL.CONTROL_SEQUENCE_CORRID]
    assert list(controls["START"][0].int32_false_true) == [0, 1]
    assert list(controls["END"][0].int32_false_true) == [0, 1]
    assert controls["CORRID"][0].data_type == mc.TYPE_UINT64
    # controls are filled by Triton, so they are not ordinary inputs
    assert [i.name for i in cfg.input] == ["VALUE"]
    assert not configs(compile_to_serve(example("streaming")))["dequantize"].HasField("sequence_batching")


def test_oldest_strategy_with_ready_control_and_states() -> None:
    doc = example("streaming")
    m = doc["spec"]["models"][1]
    del m["backend"]
    m["platform"] = "onnxruntime_onnx"  # a backend that keeps implicit states
    m["sequenceBatching"] = {
        "strategy": "oldest",
        "maxSequenceIdleMicroseconds": 1234,
        "maxCandidateSequences": 6,
        "preferredBatchSizes": [2, 4],
        "maxQueueDelayMicroseconds": 300,
        "controls": {"start": "S", "ready": "R"},
        "states": [{"inputName": "ACC_IN", "outputName": "ACC_OUT", "dataType": "FP32", "dims": [1]}],
    }
    sb = configs(compile_to_serve(doc))["accumulator"].sequence_batching
    assert sb.WhichOneof("strategy_choice") == "oldest"
    assert sb.max_sequence_idle_microseconds == 1234
    assert sb.oldest.max_candidate_sequences == 6
    assert list(sb.oldest.preferred_batch_size) == [2, 4]
    assert sb.oldest.max_queue_delay_microseconds == 300
    assert {c.name: [k.kind for k in c.control] for c in sb.control_input} == {
        "S": [CONTROL.CONTROL_SEQUENCE_START],
        "R": [CONTROL.CONTROL_SEQUENCE_READY],
    }
    (state,) = sb.state
    assert (state.input_name, state.output_name, state.data_type, list(state.dims)) == (
        "ACC_IN",
        "ACC_OUT",
        mc.TYPE_FP32,
        [1],
    )


def test_oldest_strategy_defaults_candidates_to_max_batch_size() -> None:
    doc = example("streaming")
    doc["spec"]["models"][1]["maxBatchSize"] = 6
    doc["spec"]["models"][1]["sequenceBatching"] = {"strategy": "oldest"}
    sb = configs(compile_to_serve(doc))["accumulator"].sequence_batching
    assert sb.oldest.max_candidate_sequences == 6
    assert sb.max_sequence_idle_microseconds > 0
    assert len(sb.control_input) == 0


# --------------------------------------------------------------------------- ensemble batch size


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [((8, 8, 8), 8), ((8, 2, 8), 2), ((16, 8, 4), 4)],
    ids=["equal", "middle-smallest", "last-smallest"],
)
def test_ensemble_max_batch_size_is_the_minimum_over_steps(sizes: tuple[int, ...], expected: int) -> None:
    doc = example("fanout")
    for m, size in zip(doc["spec"]["models"], sizes, strict=True):
        m["maxBatchSize"] = size
        if "dynamicBatching" in m:
            m["dynamicBatching"]["preferredBatchSizes"] = [1]
    assert expected == min(sizes)
    artifacts = compile_to_serve(doc)
    assert ensembles(artifacts)["vision"].max_batch_size == expected
    (rcfg,) = routers(artifacts).values()
    assert rcfg.max_batch_size == expected


def test_explicit_ensemble_max_batch_size_below_steps() -> None:
    doc = example("fanout")
    doc["spec"]["pipelines"][0]["maxBatchSize"] = 3
    assert ensembles(compile_to_serve(doc))["vision"].max_batch_size == 3


def test_non_batching_pipeline_keeps_full_dims() -> None:
    doc = example("fanout")
    for m in doc["spec"]["models"]:
        m["maxBatchSize"] = 0
        m.pop("dynamicBatching", None)
    artifacts = compile_to_serve(doc)
    ens = ensembles(artifacts)["vision"]
    assert ens.max_batch_size == 0
    assert [list(t.dims) for t in ens.input] == [[4]]
    assert [(t.name, list(t.dims)) for t in ens.output] == [
        ("FEATURES", [4]),
        ("SCORE_B", [4]),
        ("SCORE_C", [1]),
    ]
    (rcfg,) = routers(artifacts).values()
    assert rcfg.max_batch_size == 0 and list(rcfg.input[0].dims) == [4]


# --------------------------------------------------------------------------- one writer per tensor


def _check_dataflow(cfg: mc.ModelConfig, text: bytes) -> None:
    steps = cfg.ensemble_scheduling.step
    # no map in the text has a repeated key (protobuf text format would keep only the last)
    assert text.count(b"input_map {") == sum(len(s.input_map) for s in steps)
    assert text.count(b"output_map {") == sum(len(s.output_map) for s in steps)
    writers = Counter(i.name for i in cfg.input)
    for s in steps:
        writers.update(s.output_map.values())
        assert not set(s.input_map.values()) & set(s.output_map.values()), (
            f"{s.model_name} reads its own output"
        )
    multi = {t: n for t, n in writers.items() if n > 1}
    assert not multi, f"tensors with several writers: {multi}"
    for s in steps:
        for tensor in s.input_map.values():
            assert writers[tensor] == 1, f"{s.model_name} reads {tensor!r}, which nothing writes"
    for o in cfg.output:
        assert writers[o.name] == 1, f"ensemble output {o.name!r} is not written"
    read = {t for s in steps for t in s.input_map.values()} | {o.name for o in cfg.output}
    for i in cfg.input:
        assert i.name in read, f"ensemble input {i.name!r} is never read"
    for s in steps:
        assert s.output_map, f"step {s.model_name} writes nothing"
        assert set(s.output_map.values()) & read, f"step {s.model_name}'s outputs are never read"


@pytest.mark.parametrize("name", list(ALL_DOCS))
def test_every_ensemble_tensor_has_exactly_one_writer(name: str) -> None:
    artifacts = compile_to_serve(ALL_DOCS[name]())
    found = 0
    for path, data in artifacts.files.items():
        if path.endswith("/config.pbtxt"):
            cfg = parse_text(data)
            if cfg.platform == "ensemble":
                found += 1
                _check_dataflow(cfg, data)
    assert found == 1


def test_step_named_like_a_router_does_not_share_its_tensors() -> None:
    # regression: the router for `s.T` used to be named `p__s__T__router`, the same as a step,
    # so both wrote `p__s__T__router.OUTPUT_0`
    artifacts = compile_to_serve(step_named_like_router_doc())
    (router,) = artifacts.plan.routers
    assert router.name != "p__s__T__router"
    ens = ensembles(artifacts)["p"]
    b = _step_by_model(ens, "b")
    assert not b.output_map["OUTPUT_0"].startswith(router.name + ".")


def test_graph_summary_lists_routers_and_ensembles() -> None:
    artifacts = compile_to_serve(example("fanout"))
    summary = artifacts.graph_summary()
    (ens,) = summary["ensembles"]
    assert (ens["name"], ens["maxBatchSize"], ens["fanOut"]) == ("vision", 8, "router")
    (r,) = summary["routers"]
    assert r["source"] == "extract.FEATS_A"
    assert r["name"] in ens["steps"]
    assert sorted(r["consumers"]) == ["head_b.FEATS_IN_B", "head_c.FEATS_IN_C", "outputs.FEATURES"]


def test_generated_files_layout() -> None:
    artifacts = compile_to_serve(example("fanout"))
    (router,) = artifacts.plan.routers
    assert set(artifacts.files) == {
        "extractor/config.pbtxt",
        "head_b/config.pbtxt",
        "head_c/config.pbtxt",
        "vision/config.pbtxt",
        "vision/1/.keep",
        f"{router.name}/config.pbtxt",
        f"{router.name}/1/model.py",
    }
    assert artifacts.models == ("extractor", "head_b", "head_c")


def test_non_batching_step_is_exempt_from_the_ensemble_batch_size() -> None:
    """As in Triton: maxBatchSize-0 steps do not cap the ensemble; their full dims are compared."""
    doc = example("diamond")
    join = next(m for m in doc["spec"]["models"] if m["name"] == "join")
    join["maxBatchSize"] = 0
    for t in join["inputs"] + join["outputs"]:
        t["dims"] = [-1, *t["dims"]]
    assert ensembles(compile_to_serve(doc))["diamond"].max_batch_size == 8
    doc["spec"]["pipelines"][0]["maxBatchSize"] = 8
    assert ensembles(compile_to_serve(doc))["diamond"].max_batch_size == 8


def _non_batching_extractor(doc: dict[str, Any], output_dims: list[int]) -> None:
    """fanout example with `extractor` not batching: full dims [-1, 4] in, `output_dims` out."""
    m = doc["spec"]["models"][0]
    m["maxBatchSize"] = 0
    m.pop("dynamicBatching", None)
    m["inputs"][0]["dims"] = [-1, 4]
    m["outputs"][0]["dims"] = output_dims


def test_rank1_output_of_a_non_batching_step_makes_the_ensemble_flat() -> None:
    """Batching pipeline, non-batching step with output [-1]: no dims are left without the batch
    dimension, and every form a batching ensemble can declare makes Triton change the tensor's shape
    (dims [1]: [1, 1] for one item; reshape []: [batch, 1]). The ensemble is declared with
    maxBatchSize 0 and full shapes, which Triton passes on as the steps return them."""
    doc = example("fanout")
    _non_batching_extractor(doc, [-1])
    p = doc["spec"]["pipelines"][0]
    p["steps"] = p["steps"][:1]
    p["outputs"] = [{"name": "FEATURES", "from": "extract.FEATS_A"}]
    p["maxBatchSize"] = 8  # no batching step left to derive it from
    cfg = ensembles(compile_to_serve(doc))["vision"]
    assert cfg.max_batch_size == 0
    assert [(i.name, list(i.dims)) for i in cfg.input] == [("IMAGE", [-1, 4])]
    assert [(o.name, list(o.dims)) for o in cfg.output] == [("FEATURES", [-1])]


def test_no_output_is_reshaped() -> None:
    """Clients get the tensors as the steps return them: no ensemble output carries a reshape."""
    doc = example("fanout")
    _non_batching_extractor(doc, [-1, 4])
    for d in (example("fanout"), example("diamond"), doc):
        for cfg in ensembles(compile_to_serve(d)).values():
            assert not any(o.HasField("reshape") for o in cfg.output)


def test_router_over_an_unbatched_tensor_does_not_batch() -> None:
    """The router copies a non-batching step's tensor as it is: full dims and maxBatchSize 0 (a batching
    router would cap the tensor's first dimension at the ensemble's maxBatchSize)."""
    doc = example("fanout")
    doc["spec"]["pipelines"][0]["maxBatchSize"] = 8
    _non_batching_extractor(doc, [-1, 4])
    artifacts = compile_to_serve(doc)
    (rcfg,) = routers(artifacts).values()
    assert rcfg.max_batch_size == 0
    assert list(rcfg.input[0].dims) == [-1, 4]
    assert all(list(o.dims) == [-1, 4] for o in rcfg.output)
    assert ensembles(artifacts)["vision"].max_batch_size == 8


def test_router_over_a_pipeline_input_batches_with_the_ensemble() -> None:
    (rcfg,) = routers(compile_to_serve(input_fanout_doc())).values()
    assert rcfg.max_batch_size == 8 and list(rcfg.input[0].dims) == [4]


def test_models_are_served_with_no_pipeline() -> None:
    """A repository with no ensemble (TensorRT-LLM's `tensorrt_llm_bls`: a decoupled BLS model calling the
    others) needs no dummy pipeline: each model's config, nothing else."""
    doc = example("fanout")
    del doc["spec"]["pipelines"]
    artifacts = compile_to_serve(doc)
    assert sorted(artifacts.files) == [f"{m['name']}/config.pbtxt" for m in doc["spec"]["models"]]
    assert artifacts.plan.ensembles == () and artifacts.graph_summary()["routers"] == []
