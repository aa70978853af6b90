"""The chart's `helm test` program (tritonpipeline.runtime.chart_test): its pipeline is one the webhook admits
and the compiler compiles for CPU, its model and pipeline answer 4 * IN on the real tritonserver, and its
answer check refuses a wrong or missing output. On kind, `make e2e` runs the chart's test itself."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT
from tritonpipeline.kube import checks
from tritonpipeline.runtime import chart_test
from tritonpipeline.spec import parse_pipeline

CHART = ROOT / "charts" / "triton-pipeline"
TESTS = "templates/tests/pipeline-test.yaml"


def test_the_pipeline_is_admitted_and_asks_for_no_gpu() -> None:
    doc = chart_test.pipeline("tp-test", "triton-pipeline", "tp-test-models")
    tp = parse_pipeline(doc)
    artifacts, problems = checks.check(tp)
    assert artifacts is not None and problems == [], problems
    assert tp.spec.server.gpus == 0
    assert {i.kind for m in tp.spec.models for i in m.instances} == {"CPU"}
    assert doc["spec"]["modelRepository"]["uri"] == "pvc://tp-test-models/repository"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"outputs": [{"name": "OUT", "data": [4.0, 8.0, 12.0, 16.0]}]}, None),
        ({"outputs": [{"name": "OUT", "data": [2.0, 4.0, 6.0, 8.0]}]}, "OUT is [2.0, 4.0, 6.0, 8.0]"),
        ({"outputs": [{"name": "Y", "data": [4.0, 8.0, 12.0, 16.0]}]}, "no output OUT in the answer"),
        ({}, "no output OUT"),
    ],
)
def test_the_answer_check_names_what_is_wrong(answer: dict[str, Any], says: str | None) -> None:
    problem = chart_test.answer_problem(answer)
    assert problem is None if says is None else (problem is not None and says in problem)


@pytest.mark.helm
def test_the_chart_s_test_runs_the_program_s_two_steps_on_one_claim_apart_from_the_operator(
    helm_binary: Path,
) -> None:
    """`helm template` of the chart's test: hooks of `helm test` only, the two pods in turn calling the
    module's subcommands on the claim the template creates, in the namespace the operator watches, under
    labels the operator's Service, PodDisruptionBudget and NetworkPolicy do not select."""
    out = subprocess.run(
        [str(helm_binary), "template", "tp", str(CHART), "-n", "tp-ns", "--show-only", str(TESTS)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert all(d["metadata"]["annotations"]["helm.sh/hook"] == "test" for d in docs)
    assert {d["metadata"]["namespace"] for d in docs} == {"tp-ns"}
    pods = sorted(
        (d for d in docs if d["kind"] == "Pod"),
        key=lambda d: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]),
    )
    (claim,) = [d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"]
    writer, runner = (p["spec"]["containers"][0]["command"] for p in pods)
    assert writer[:4] == ["python", "-m", "tritonpipeline.runtime.chart_test", "write-model"]
    assert pods[0]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
    assert runner[3] == "run" and runner[runner.index("--claim") + 1] == claim
    assert runner[runner.index("--namespace") + 1] == "tp-ns"
    operator = yaml.safe_load(
        subprocess.run(
            [str(helm_binary), "template", "tp", str(CHART), "--show-only", "templates/deployment.yaml"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    selector = operator["spec"]["selector"]["matchLabels"]
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert not selector.items() <= labels.items(), labels
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    where = subprocess.run(
        [str(helm_binary), "template", "tp", str(CHART), "-n", "tp-ns", "--show-only", str(TESTS),
         "--set", "rbac.clusterWide=false", "--set", "watchNamespaces={ml}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert {d["metadata"]["namespace"] for d in yaml.safe_load_all(where) if d} == {"ml"}


@pytest.mark.tritonserver
def test_the_model_and_pipeline_answer_four_times_the_input_on_tritonserver(
    tmp_path: Path, serve_pipeline: Any
) -> None:
    model = chart_test.write_model(tmp_path / "claim")
    assert model == tmp_path / "claim" / "repository" / "double" / "1" / "model.py"
    doc = chart_test.pipeline("tp-test", "default", "claim")
    doc["spec"]["modelRepository"]["uri"] = str(tmp_path / "claim" / "repository")
    server = serve_pipeline(doc)
    answer = chart_test.infer(f"http://{server.http_url}", timeout=30)
    assert chart_test.answer_problem(answer) is None, answer
