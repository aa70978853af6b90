"""The chart's alerts (templates/prometheusrule.yaml) on real parts: the template rendered by the real helm
(built from Go modules) and each alert run by `promtool test rules` (Debian's prometheus package) over the
fixtures in tests/alert_rules/: input series, then the alerts that must fire, with their labels and
annotations, and the evaluations at which none may. A broken template fails here, not in a cluster."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.helm import Helm, by_kind
from harness.prometheus import missing_promtool, promtool_binary

pytestmark = [pytest.mark.helm, pytest.mark.prometheus]

FIXTURES = Path(__file__).resolve().parents[1] / "alert_rules"
VALUES = FIXTURES / "values.yaml"
UNIT_TESTS = sorted(p for p in FIXTURES.glob("*.yaml") if p != VALUES)
ALERTS = {
    "TritonPipelineNotReady",
    "TritonPipelineQueueTimeHigh",
    "TritonPipelineReconcileErrors",
    "TritonPipelineOperatorLoopStalled",
}


@pytest.fixture
def promtool() -> str:
    reason = missing_promtool()
    if reason:
        pytest.skip(reason)
    binary = promtool_binary()
    assert binary is not None
    return binary


@pytest.fixture
def helm(helm_binary: Path, tmp_path: Path) -> Helm:
    return Helm(helm_binary, tmp_path / "helm-home")


def rendered_rules(helm: Helm, path: Path, set_values: list[str] | None = None) -> dict[str, Any]:
    """The chart's PrometheusRule as a Prometheus rule file (its spec's groups), written to `path`."""
    (rule,) = by_kind(helm.template("rel", "ops", [VALUES], set_values=set_values or []), "PrometheusRule")
    rules = {"groups": rule["spec"]["groups"]}
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return rules


def run_unit_test(promtool: str, fixture: dict[str, Any], rules: Path, path: Path) -> str:
    """`promtool test rules` on `fixture` with the rendered `rules`; its output (the test fails on a
    failed expectation, with promtool's account of it)."""
    path.write_text(yaml.safe_dump({"rule_files": [str(rules)], **fixture}, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"promtool test rules {path.name}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_the_rendered_rules_pass_promtool_check(helm, promtool, tmp_path):
    rules_path = tmp_path / "rules.yaml"
    rules = rendered_rules(helm, rules_path)
    assert {r["alert"] for g in rules["groups"] for r in g["rules"]} == ALERTS
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        assert rule["labels"]["severity"] and rule["labels"]["team"] == "ml", rule["alert"]
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), rule["alert"]
        assert rule["annotations"]["runbook_url"].endswith(f"#alert-{rule['alert'].lower()}")
    proc = subprocess.run([promtool, "check", "rules", str(rules_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout


@pytest.mark.parametrize("fixture", UNIT_TESTS, ids=lambda p: p.stem)
def test_each_alert_fires_where_it_must_and_nowhere_else(helm, promtool, tmp_path, fixture):
    rules = tmp_path / "rules.yaml"
    rendered_rules(helm, rules)
    run_unit_test(promtool, yaml.safe_load(fixture.read_text()), rules, tmp_path / fixture.name)


def test_every_alert_has_a_case_that_fires_and_one_that_must_not():
    """The fixtures cover each alert both ways: an evaluation that expects it, one that expects none."""
    fires, silent = set(), set()
    for path in UNIT_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test["alert_rule_test"]:
                (fires if case["exp_alerts"] else silent).add(case["alertname"])
    assert fires == ALERTS and silent == ALERTS


@pytest.mark.parametrize(("bound", "fires"), [(149999, True), (150001, False), (1000000, False)])
def test_the_queue_time_bound_is_the_value_set(helm, promtool, tmp_path, bound, fires):
    """queue_time.yaml's head_b waits 150000 µs on average: it fires under a bound below that, not above
    (1000000 too, which Go would print as 1e+06)."""
    rules = tmp_path / "rules.yaml"
    rendered = rendered_rules(helm, rules, [f"prometheusRule.queueTime.thresholdMicroseconds={bound}"])
    (queue,) = [
        r for g in rendered["groups"] for r in g["rules"] if r["alert"] == "TritonPipelineQueueTimeHigh"
    ]
    assert queue["expr"].endswith(f") > {bound}")
    fixture = yaml.safe_load((FIXTURES / "queue_time.yaml").read_text())
    for test in fixture["tests"]:
        for case in test["alert_rule_test"]:
            for alert in case["exp_alerts"]:
                alert["exp_annotations"]["description"] = alert["exp_annotations"]["description"].replace(
                    "the bound: 100000µs", f"the bound: {bound}µs"
                )
            if not fires:
                case["exp_alerts"] = []
    run_unit_test(promtool, copy.deepcopy(fixture), rules, tmp_path / "queue_time.yaml")


def test_an_operator_selector_replaces_the_service_monitors_labels(helm, promtool, tmp_path):
    """With prometheusRule.operatorSelector the alerts select the operator's series by those matchers
    (a Prometheus that scrapes it another way); the default ones then match nothing."""
    rules = tmp_path / "rules.yaml"
    rendered = rendered_rules(helm, rules, ['prometheusRule.operatorSelector=job="tp"'])
    exprs = [
        r["expr"]
        for g in rendered["groups"]
        for r in g["rules"]
        if r["alert"] != "TritonPipelineQueueTimeHigh"
    ]
    assert all('{job="tp"}' in e or '{outcome="error",job="tp"}' in e for e in exprs), exprs
    fixture = yaml.safe_load((FIXTURES / "loop_stalled.yaml").read_text())
    for test in fixture["tests"]:
        for case in test["alert_rule_test"]:
            case["exp_alerts"] = []  # job="rel-triton-pipeline-metrics" is not `tp`
    run_unit_test(promtool, fixture, rules, tmp_path / "loop_stalled.yaml")
