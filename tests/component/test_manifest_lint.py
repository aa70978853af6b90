"""`make lint-manifests` (harness/manifest_lint.py): the exceptions file's rules (pure), and the real
kubeconform and kube-score catching what they are there for, in manifests we break on purpose.
Here the tests on real components; the pure ones are in tests/unit/test_manifest_lint.py."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import manifest_lint as lint
from harness.gotools import ToolError, ToolUnavailable, ensure_tool
from helpers import example
from support.manifest_lint import _exceptions

# ----------------------------------------------------------------------------------- the real tools


def _tool(name: str) -> Path:
    try:
        return ensure_tool(name)
    except ToolUnavailable as err:
        pytest.skip(f"{name} unavailable: {err}")
    except ToolError as err:
        pytest.fail(f"building {name} failed: {err}", pytrace=False)


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _tool("kubernetes-openapi")
    return lint.schema_dir(tmp_path_factory.mktemp("schemas"))


def _streaming() -> tuple[dict[str, Any], ...]:
    return lint.render_pipeline(lint._cluster_doc(example("streaming")))


def _deployment(objects: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return deployment


@pytest.mark.linters
def test_kubeconform_passes_the_rendered_example_and_refuses_what_the_api_server_would(
    schemas, tmp_path
) -> None:
    binary = _tool("kubeconform")
    good = _streaming()
    assert lint.kubeconform(binary, schemas, [lint.Render("good", good)], tmp_path) == []
    misspelt = copy.deepcopy(good)
    _deployment(misspelt)["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    wrong_type = copy.deepcopy(good)
    _deployment(wrong_type)["spec"]["replicas"] = "two"
    pipeline = copy.deepcopy(example("streaming"))
    pipeline["spec"]["serverr"] = {}  # our own CRD's schema: an unknown spec field
    renders = [
        lint.Render("misspelt", misspelt),
        lint.Render("wrong type", wrong_type),
        lint.Render("custom resource", (pipeline,)),
    ]
    found = lint.kubeconform(binary, schemas, renders, tmp_path)
    assert [(f.source, f.obj) for f in found] == [
        ("misspelt", "Deployment/streaming"),
        ("wrong type", "Deployment/streaming"),
        ("custom resource", "TritonPipeline/streaming"),
    ]
    assert "imagePullPolicyy" in found[0].message and "serverr" in found[2].message


@pytest.mark.linters
def test_kube_score_finds_a_privileged_container_the_exceptions_do_not_excuse(tmp_path) -> None:
    binary = _tool("kube-score")
    objects = copy.deepcopy(_streaming())
    _deployment(objects)["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
    found = lint.kube_score(binary, [lint.Render("privileged", objects)], tmp_path)
    left = lint.judge(found, lint.load_exceptions())
    assert [(f.check, f.obj, f.message) for f in left] == [
        (
            "container-security-context-privileged",
            "Deployment/streaming",
            "tritonserver: The container is privileged",
        )
    ]


@pytest.mark.linters
def test_checkov_finds_a_pod_on_the_host_network_the_exceptions_do_not_excuse(tmp_path) -> None:
    binary = lint.checkov_binary(io.StringIO())
    objects = copy.deepcopy(_streaming())
    _deployment(objects)["spec"]["template"]["spec"]["hostNetwork"] = True
    found = lint.checkov(binary, [lint.Render("host network", objects)], tmp_path)
    left = lint.judge(found, lint.load_exceptions())
    assert [(f.check, f.obj, f.source) for f in left] == [
        ("CKV_K8S_19", "Deployment/streaming", "host network")
    ]


@pytest.mark.linters
@pytest.mark.helm
def test_a_missing_exception_and_a_stale_one_both_fail_the_run(tmp_path) -> None:
    """The whole run (every rendering, every tool) against the checked-in exceptions but one, plus one
    that matches nothing: the findings of the missing one are left, the extra one is stale."""
    for tool in ("kubeconform", "kube-score", "helm"):
        _tool(tool)
    entries = yaml.safe_load(lint.EXCEPTIONS.read_text())
    dropped = next(e for e in entries if e["check"].startswith("CKV_K8S_155"))
    kept = [e for e in entries if e is not dropped]
    stale = {"tool": "kube-score", "check": "no-such-check", "reason": "excuses nothing, so it must go"}
    report = lint.run(tmp_path, _exceptions(tmp_path, [*kept, stale]), log=io.StringIO())
    assert not report.ok
    assert report.unexcused and {(f.check, f.obj) for f in report.unexcused} == {
        ("CKV_K8S_155", "ClusterRole/rel-triton-pipeline-webhook"),  # the chart's default release name
        ("CKV_K8S_155", "ClusterRole/tp-operator-webhook"),  # ci/custom-resources-values.yaml's fullname
    }
    assert [e.check for e in report.unused] == ["no-such-check"]
    kinds = {o["kind"] for r in report.renders for o in r.objects}
    assert {"Deployment", "Ingress", "HTTPRoute", "DestinationRule", "ScaledObject", "NetworkPolicy"} <= kinds
    assert "CustomResourceDefinition" in kinds  # the chart's CRD is checked too
