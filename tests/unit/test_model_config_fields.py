"""Model-configuration fields that published Triton deployments rely on (`reshape`, `label_filename`,
`format`, `allow_ragged_batch`, `is_shape_tensor`, queue and version policies) render as Triton's own
fields. Served on the real tritonserver: tests/component/test_model_config_fields.py."""

from __future__ import annotations

from helpers import compile_to_serve, doc_of
from support.model_config_fields import POLICIES, probe_doc, versioned
from tritonpipeline.compiler.triton_config import mc, parse_text


def test_the_fields_render_as_tritons_own() -> None:
    doc = probe_doc()
    m = doc["spec"]["models"][0]
    m["inputs"][0].update(allowRaggedBatch=True, format="NONE")
    m["outputs"][0]["isShapeTensor"] = True
    m["backend"] = "tensorrt"  # shape tensors are TensorRT's (rendered here, not served)
    config = parse_text(compile_to_serve(doc).files["reshaped/config.pbtxt"])
    (inp,) = config.input
    assert inp.HasField("reshape") and list(inp.reshape.shape) == []  # present, and empty
    assert inp.allow_ragged_batch and inp.format == mc.ModelInput.FORMAT_NONE
    rank, scores = config.output
    assert rank.is_shape_tensor and not rank.HasField("reshape") and rank.label_filename == ""
    assert scores.label_filename == "labels.txt" and not scores.is_shape_tensor
    plain = parse_text(compile_to_serve(probe_doc()).files["plain/config.pbtxt"])
    assert not plain.input[0].HasField("reshape")


def test_queue_policy_and_version_policy_render() -> None:
    doc = doc_of("versions", [versioned(n, p) for n, (p, _) in POLICIES.items()], [])
    files = compile_to_serve(doc).files
    db = parse_text(files["every/config.pbtxt"]).dynamic_batching
    assert (db.priority_levels, db.default_priority_level) == (2, 2)
    assert db.default_queue_policy.max_queue_size == 16
    assert db.default_queue_policy.timeout_action == mc.ModelQueuePolicy.REJECT
    (level,) = db.priority_queue_policy
    assert level == 1 and db.priority_queue_policy[1].timeout_action == mc.ModelQueuePolicy.DELAY
    assert db.priority_queue_policy[1].default_timeout_microseconds == 5_000_000
    policies = {n: parse_text(files[f"{n}/config.pbtxt"]).version_policy for n in POLICIES}
    assert policies["latest_one"].latest.num_versions == 1
    assert policies["every"].HasField("all")
    assert list(policies["only_first"].specific.versions) == [1]
