"""`validate` agrees with the operator and with the API server: every name the renderers derive is
checked in one place (render/checks.py) that both use, the limits are the API server's own (checked
against a real kube-apiserver), and warnings (allowed but probably wrong) are printed and returned as
data without failing validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import example
from tritonpipeline import cli
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.render import autoscaling_objects, checks, routing_objects
from tritonpipeline.render.manifests import render_children
from tritonpipeline.render.meta import CONFIGMAP_DIGEST_CHARS, configmap_name
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

PVC = "pvc://models/triton"  # a cluster model repository: nothing is read from the local disk


def write(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def validate_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = cli.main(["validate", "--output", "json", str(path)])
    (result,) = json.loads(capsys.readouterr().out)
    return code, result


def operator_problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """What the operator's reconcile does: parse, compile, render; the problems it refuses with."""
    tp = parse_pipeline(doc)
    with pytest.raises(SpecError) as info:
        render_children(tp, compile_pipeline(tp), Settings())
    return [(p.path, p.message) for p in info.value.problems]


def _header(doc: dict[str, Any], name: str) -> None:
    doc["metadata"]["name"] = name
    doc["spec"]["routing"] = {"sessionAffinity": "Header", "provider": "istio"}


def _hpa(doc: dict[str, Any], pipeline: str, metric: str = "queueTime") -> None:
    doc["spec"]["pipelines"][0]["name"] = pipeline
    doc["spec"]["autoscaling"] = {"maxReplicas": 3, "metric": metric}


# (example, mutation, field path, words of the message)
OPERATOR_REFUSES = [
    ("streaming", lambda d: _header(d, "s" * 60), "metadata.name", "shorten the pipeline name to 54"),
    ("streaming", lambda d: _header(d, "s" * 55), "metadata.name", "headless Service"),
]


@pytest.mark.parametrize(
    ("base", "mutate", "path", "words"),
    OPERATOR_REFUSES,
    ids=["header-60", "header-55"],
)
def test_validate_refuses_what_the_operator_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], base: str, mutate: Any, path: str, words: str
) -> None:
    doc = example(base, PVC)
    mutate(doc)
    expected = operator_problems(doc)
    assert any(p == path and words in m for p, m in expected), expected
    code, result = validate_json(write(tmp_path, doc), capsys)
    assert code == 1
    assert [(e["path"], e["message"]) for e in result["errors"]] == expected


def test_names_at_the_limit_pass_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = example("streaming", PVC)
    _header(doc, "s" * 54)
    tp = parse_pipeline(doc)
    render_children(tp, compile_pipeline(tp), Settings())
    assert validate_json(write(tmp_path, doc), capsys)[0] == 0


SPECS = {
    "header-ingress-hpa": lambda d: d["spec"].update(
        routing={"sessionAffinity": "Header", "provider": "ingress-nginx"}, autoscaling={"maxReplicas": 3}
    ),
    "istio-keda": lambda d: d["spec"].update(
        routing={"sessionAffinity": "Header", "provider": "istio"},
        autoscaling={"maxReplicas": 3, "engine": "keda"},
    ),
    **{
        f"gateway-api-{impl}": lambda d, impl=impl: d["spec"].update(
            routing={"sessionAffinity": "Header", "gateway": {"name": "gw", "implementation": impl}}
        )
        for impl in ("envoy-gateway", "istio", "nginx-gateway-fabric", "standard")
    },
    "client-ip": lambda d: d["spec"].update(routing={"sessionAffinity": "ClientIP"}),
}


@pytest.mark.parametrize("mutate", SPECS.values(), ids=SPECS.keys())
def test_every_rendered_object_name_is_a_checked_name(mutate: Any) -> None:
    doc = example("streaming", PVC)
    mutate(doc)
    tp = parse_pipeline(doc)
    children = render_children(tp, compile_pipeline(tp), Settings())
    objects = [*children.all(), *children.routing.provider_objects]
    objects += [children.scaled_object] if children.scaled_object else []
    checked = {n.name for n in checks.derived_names(tp)}
    configmaps = {c["metadata"]["name"] for c in children.configmaps}
    for obj in objects:
        name = obj["metadata"]["name"]
        if name in configmaps:  # parts differ by digest and index only: a zero digest, part 0 stands for them
            checked_form = configmap_name(tp, 0, "0" * CONFIGMAP_DIGEST_CHARS)
            assert len(name.rsplit("-", 1)[0]) == len(checked_form.rsplit("-", 1)[0]), name
            name = checked_form
        assert name in checked, f"{obj['kind']} {name} is not checked by render/checks.py"


# --------------------------------------------------------------------------- against the API server


def _applies(kube: Kube, obj: dict[str, Any]) -> bool:
    try:
        kube.apply(obj)
    except KubeError as exc:
        assert exc.status == 422, str(exc)
        return False
    return True


@pytest.mark.apiserver
@pytest.mark.parametrize("length", [54, 55])
def test_headless_service_limit_is_the_api_servers(kube: Kube, namespace: str, length: int) -> None:
    doc = example("streaming", PVC)
    _header(doc, "s" * length)
    doc["metadata"]["namespace"] = namespace
    tp = parse_pipeline(doc)
    ours = not checks.name_problems(tp)
    meta = routing_objects.routing_metadata(tp, Settings())
    service = routing_objects.headless_service(tp, meta)
    ingresses = routing_objects.ingresses(tp, meta)
    assert ours == (length == 54)
    assert _applies(kube, service) == ours
    # <name>-http/-grpc fit either way, but their backend is the headless Service
    assert all(_applies(kube, i) == ours for i in ingresses)


@pytest.mark.apiserver
@pytest.mark.parametrize("pipeline", ["vision", "_vision", "vision-", "v" * 64])
def test_hpa_selector_values_are_not_limited_by_the_api_server(
    kube: Kube, namespace: str, pipeline: str
) -> None:
    """The HPA's metric selector lists the ensembles (`model NotIn [...]`); the API server takes any
    value there, so pipeline names that are no label values must not be refused either."""
    doc = example("fanout", PVC)
    _hpa(doc, pipeline)
    doc["metadata"]["namespace"] = namespace
    tp = parse_pipeline(doc)
    ours = not checks.name_problems(tp)
    hpa = autoscaling_objects.hpa(tp, Settings())
    assert hpa is not None
    assert ours and _applies(kube, hpa)


# --------------------------------------------------------------------------- one document per object


def test_two_documents_with_one_name_are_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = example("fanout"), example("diamond")
    second["metadata"]["name"] = first["metadata"]["name"]
    code, result = validate_json(write(tmp_path, first, second), capsys)
    assert code == 1
    (error,) = result["errors"]
    assert error["path"] == "document 2: metadata.name"
    assert "also document 1" in error["message"]


def test_cluster_problems_keep_their_documents_place_beside_other_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checks after parsing (the graph, what the cluster would refuse) name the document as the
    file numbers it, other Kubernetes objects counted."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
    good, bad = example("fanout"), example("diamond")
    bad["spec"]["pipelines"][0]["steps"][1]["inputs"] = {
        k: "rigth.FEATS" for k in bad["spec"]["pipelines"][0]["steps"][1]["inputs"]
    }
    code, result = validate_json(write(tmp_path, namespace, good, bad), capsys)
    assert code == 1
    assert {e["path"].split(":")[0] for e in result["errors"]} == {"document 3"}, result["errors"]


def test_one_name_in_two_namespaces_is_fine_but_render_asks_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = example("fanout"), example("diamond")
    second["metadata"]["name"] = first["metadata"]["name"]
    first["metadata"]["namespace"], second["metadata"]["namespace"] = "a", "b"
    path = write(tmp_path, first, second)
    assert cli.main(["validate", str(path)]) == 0
    capsys.readouterr()
    assert cli.main(["render", str(path), "--name", "vision", "-o", str(tmp_path / "out")]) == 1
    assert "several TritonPipelines are named 'vision'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- field rules


@pytest.mark.parametrize(
    ("mutate", "path", "words"),
    [
        (lambda s: s["models"][0].update(instances=[{"kind": "GPU", "gpus": [0, 2]}]), ".gpus", "0..1"),
        (lambda s: s["models"][0].update(instances=[{"kind": "GPU", "gpus": [5]}]), ".gpus", "index 5"),
        (lambda s: s["models"][0].update(instances=[{"kind": "CPU", "gpus": [0]}]), ".gpus", "kind GPU"),
        (lambda s: s["models"][0].update(instances=[{"gpus": [1]}]), ".gpus", "kind AUTO"),
    ],
    ids=["index-equal-to-gpus", "index-far-above", "cpu-group", "auto-group"],
)
def test_instance_gpu_indices_exist_in_the_pod(mutate: Any, path: str, words: str) -> None:
    doc = example("fanout", PVC)
    doc["spec"]["server"]["gpus"] = 2
    mutate(doc["spec"])
    with pytest.raises(SpecError) as info:
        parse_pipeline(doc)
    (p,) = info.value.problems
    assert p.path == "spec.models[0].instances[0]" + path
    assert words in p.message


def test_instance_gpu_indices_below_server_gpus_are_fine() -> None:
    doc = example("fanout", PVC)
    doc["spec"]["server"]["gpus"] = 2
    doc["spec"]["models"][0]["instances"] = [{"kind": "GPU", "gpus": [0, 1]}]
    tp = parse_pipeline(doc)
    assert not checks.warnings(tp)


def _s3_secret(spec: dict[str, Any], name: str) -> None:
    spec["modelRepository"] = {"uri": "s3://bucket/models", "secretRef": {"name": name}}


@pytest.mark.parametrize(
    ("mutate", "path", "words"),
    [
        (lambda d: d["metadata"].update(namespace="ML"), "metadata.namespace", "namespace"),
        (
            lambda d: d["spec"]["modelRepository"].update(uri="pvc://Models_Claim/triton"),
            "spec.modelRepository.uri",
            "claim name",
        ),
        (lambda d: _s3_secret(d["spec"], "S3 creds"), "spec.modelRepository.secretRef.name", "object name"),
        (
            lambda d: d["spec"]["server"].update(nodeSelector={"pool": "gpu nodes"}),
            "spec.server.nodeSelector.pool",
            "label value",
        ),
        (
            lambda d: d["spec"]["server"].update(nodeSelector={"bad key!": "x"}),
            "spec.server.nodeSelector.bad key!",
            "label key",
        ),
        (
            lambda d: d["spec"]["server"].update(gpuResource="gpu"),
            "spec.server.gpuResource",
            "with its domain",
        ),
    ],
    ids=["namespace", "pvc-claim", "secret-name", "node-selector-value", "node-selector-key", "gpu-resource"],
)
def test_names_the_api_server_checks_are_checked(mutate: Any, path: str, words: str) -> None:
    doc = example("fanout", PVC)
    mutate(doc)
    with pytest.raises(SpecError) as info:
        parse_pipeline(doc)
    (p,) = info.value.problems
    assert p.path == path and words in p.message, p


# --------------------------------------------------------------------------- warnings


def _stateful_autoscaled(doc: dict[str, Any]) -> None:
    doc["spec"]["routing"] = {"sessionAffinity": "None"}
    doc["spec"]["autoscaling"] = {"maxReplicas": 4}


def test_warnings_are_printed_with_their_path_and_do_not_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = example("streaming")
    _stateful_autoscaled(doc)
    doc["spec"]["modelRepository"]["secretRef"] = {"name": "s3-creds"}
    path = write(tmp_path, doc)
    assert cli.main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "is valid" in out
    lines = err.splitlines()
    assert any(line.startswith(f"warning: {path}: spec.routing.sessionAffinity: ") for line in lines), err
    assert any(line.startswith(f"warning: {path}: spec.modelRepository.secretRef: ") for line in lines), err
    assert len(lines) == 2


def test_warnings_are_data_in_json_and_from_one_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = example("streaming")
    _stateful_autoscaled(doc)
    code, result = validate_json(write(tmp_path, doc), capsys)
    assert code == 0 and result["valid"]
    (warning,) = result["warnings"]
    assert warning["path"] == "spec.routing.sessionAffinity"
    # the same rule the operator's SessionAffinity condition reports (render/routing_objects.py)
    tp = parse_pipeline(doc)
    assert [w.message for w in checks.warnings(tp)] == [routing_objects.affinity_problem(tp)]
    assert "autoscaling up to 4 replicas" in warning["message"]


def test_gpu_indices_with_a_cpu_only_server_are_a_warning() -> None:
    doc = example("fanout", PVC)
    doc["spec"]["server"]["gpus"] = 0
    doc["spec"]["models"][0]["instances"] = [{"kind": "GPU", "gpus": [0]}]
    (w,) = checks.warnings(parse_pipeline(doc))
    assert w.path == "spec.models[0].instances[0].gpus" and "ignored" in w.message


SHARED_SUBSET = (
    "under fanOut: shared, extract.FEATS_A is pipeline output 'FEATURES' and feeds step 'head_b', step "
    "'head_c': Triton fails a request asking for only some of the pipeline's outputs"
)


@pytest.mark.parametrize("fan_out", ["router", "shared"])
def test_a_shared_tensor_that_is_a_pipeline_output_and_a_step_input_warns(fan_out: str) -> None:
    """extract.FEATS_A is pipeline output FEATURES and feeds head_b and head_c: shared, a request for
    some outputs fails (measured, tests/component/test_triton_loads.py); through a router it is served.
    Without the
    pipeline output, nothing to say."""
    doc = example("fanout", PVC)
    doc["spec"]["pipelines"][0]["fanOut"] = fan_out
    found = checks.warnings(parse_pipeline(doc))
    assert [(w.path, w.message.startswith(SHARED_SUBSET)) for w in found] == (
        [("spec.pipelines[0].outputs[0].from", True)] if fan_out == "shared" else []
    )
    doc["spec"]["pipelines"][0]["outputs"].pop(0)
    assert checks.warnings(parse_pipeline(doc)) == []


# A model setting that does nothing unless tritonserver runs with a flag: (model index, where in the
# model, its value, the path warned about, what the warning tells to add).
NEEDS_A_SERVER_FLAG = {
    "rateLimiter": (
        0,
        ("instances", [{"kind": "GPU", "rateLimiter": {"priority": 2}}]),
        "spec.models[0].instances[0].rateLimiter",
        "--rate-limit=execution_count",
    ),
    "response_cache": (
        1,
        ("extraConfig", "response_cache { enable: true }"),
        "spec.models[1].extraConfig",
        "--cache-config=local,size=BYTES",
    ),
    "hostPolicy": (
        0,
        ("instances", [{"kind": "GPU", "hostPolicy": "numa0"}]),
        "spec.models[0].instances[0].hostPolicy",
        "--host-policy=numa0,SETTING=VALUE",
    ),
}


@pytest.mark.parametrize(
    ("setting", "args", "warned"),
    [
        ("rateLimiter", [], True),
        ("rateLimiter", ["--rate-limit=off"], True),
        ("rateLimiter", ["--rate-limit", "execution_count"], False),
        (
            "rateLimiter",
            ["--rate-limit=execution_count", "--rate-limit=off"],
            True,
        ),  # tritonserver takes the last
        ("rateLimiter", ["--rate-limit=off", "--rate-limit=execution_count"], False),
        ("rateLimiter", ["--rate-limit=EXECUTION_COUNT"], False),  # any case, as tritonserver reads it
        ("response_cache", [], True),
        ("response_cache", ["--cache-config=local,size=1048576"], False),
        ("response_cache", ["--cache-config", "redis,host=cache"], False),
        ("response_cache", ["--response-cache-byte-size=0"], True),
        ("response_cache", ["--response-cache-byte-size", "4096"], False),
        ("response_cache", ["--response-cache-byte-size= 4096bytes"], False),  # stoll reads 4096
        (
            "response_cache",
            ["--response-cache-byte-size=4096", "--response-cache-byte-size=0"],
            True,
        ),  # the last
        ("hostPolicy", [], True),
        ("hostPolicy", ["--host-policy=numa0,numa-node=0"], False),
        ("hostPolicy", ["--host-policy", "numa0,cpu-cores=0-3"], False),
        ("hostPolicy", ["--host-policy=numa1,numa-node=1"], True),  # another policy's name
    ],
)
def test_a_model_setting_without_the_server_flag_it_needs_is_a_warning(
    setting: str, args: list[str], warned: bool
) -> None:
    index, (field, value), path, hint = NEEDS_A_SERVER_FLAG[setting]
    doc = example("fanout", PVC)
    doc["spec"]["server"]["args"] = args
    doc["spec"]["models"][index][field] = value
    found = checks.warnings(parse_pipeline(doc))
    assert [w.path for w in found] == ([path] if warned else [])
    assert all(hint in w.message for w in found)


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        ([], False),
        (["--model-control-mode=explicit"], True),
        (["--model-control-mode=EXPLICIT", "--load-model=head_b"], True),  # a step, not the pipeline
        (["--model-control-mode=explicit", "--load-model=vision"], False),  # an ensemble brings its steps
        (["--model-control-mode=explicit", "--load-model=*"], False),
        (["--model-control-mode=explicit", "--model-control-mode=poll"], False),  # the last counts
    ],
)
def test_explicit_model_control_that_leaves_a_pipeline_unloaded_is_a_warning(
    args: list[str], warned: bool
) -> None:
    doc = example("fanout", PVC)
    doc["spec"]["server"]["args"] = args
    found = checks.warnings(parse_pipeline(doc))
    assert [w.path for w in found] == (["spec.pipelines[0].name"] if warned else [])
    assert all("--load-model=vision" in w.message for w in found)


def test_secret_ref_with_pvc_is_a_warning_and_with_s3_is_not() -> None:
    doc = example("fanout", PVC)
    doc["spec"]["modelRepository"]["secretRef"] = {"name": "creds"}
    (w,) = checks.warnings(parse_pipeline(doc))
    assert w.path == "spec.modelRepository.secretRef" and "pvc://" in w.message
    doc["spec"]["modelRepository"]["uri"] = "s3://bucket/models"
    assert checks.warnings(parse_pipeline(doc)) == []
