"""The chart's `helm test` program (tritonpipeline.runtime.chart_test): its pipeline is one the webhook admits
and the compiler compiles for CPU, its model and pipeline answer 4 * IN on the real tritonserver, and its
answer check refuses a wrong or missing output. On kind, `make e2e` runs the chart's test itself.
Here the tests on real components; the pure ones are in tests/unit/test_chart_test.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT
from tritonpipeline.runtime import chart_test

CHART = ROOT / "charts" / "triton-pipeline"


TESTS = "templates/tests/pipeline-test.yaml"


@pytest.mark.helm
def test_the_chart_s_test_runs_the_program_s_two_steps_on_one_claim_apart_from_the_operator(
    helm_binary: Path,
) -> None:
    """`helm template` of the chart's test: hooks of `helm test` only, in a namespace of the test's own (the
    operator's webhook leaves the operator's namespace out, so a pipeline there is never reviewed), or the
    first watched namespace that is not the operator's; the two pods in turn calling the module's
    subcommands on the claim the template creates, under labels the operator's Service,
    PodDisruptionBudget and NetworkPolicy do not select."""

    def rendered(*settings: str) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [str(helm_binary), "template", "tp", str(CHART), "-n", "tp-ns", *settings],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return [d for d in yaml.safe_load_all(proc.stdout) if d]

    docs = [d for d in rendered() if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    (namespace,) = [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]
    assert namespace != "tp-ns"
    assert {d["metadata"].get("namespace", namespace) for d in docs} == {namespace}
    pods = sorted(
        (d for d in docs if d["kind"] == "Pod"),
        key=lambda d: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]),
    )
    (claim,) = [d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"]
    writer, runner = (p["spec"]["containers"][0]["command"] for p in pods)
    assert writer[:4] == ["python", "-m", "tritonpipeline.runtime.chart_test", "write-model"]
    assert pods[0]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
    assert runner[3] == "run" and runner[runner.index("--claim") + 1] == claim
    assert runner[runner.index("--namespace") + 1] == namespace
    (operator,) = [d for d in rendered("--skip-tests") if d["kind"] == "Deployment"]
    selector = operator["spec"]["selector"]["matchLabels"]
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert not selector.items() <= labels.items(), labels
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    namespaced = ["--set", "rbac.clusterWide=false"]
    watched = rendered(*namespaced, "--set", "watchNamespaces={tp-ns,ml}", "--show-only", TESTS)
    assert {d["metadata"]["namespace"] for d in watched} == {"ml"}
    assert "Namespace" not in {d["kind"] for d in watched}  # a watched namespace is the user's
    # watching only its own namespace, the operator serves no reviewed pipeline: there is nothing to test
    assert not [d for d in rendered(*namespaced, "--set", "watchNamespaces={tp-ns}") if d["kind"] == "Pod"]


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
