"""`make lint-manifests` (harness/manifest_lint.py): the exceptions file's rules (pure), and the real
kubeconform and kube-score catching what they are there for, in manifests we break on purpose.
Here the pure tests; those on real components are in tests/component/test_manifest_lint.py."""

from __future__ import annotations

import pytest

from harness import manifest_lint as lint
from support.manifest_lint import _exceptions


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"tool": "kube-score", "check": "x"}, "[0].reason: required"),
        ({"tool": "kube-score", "check": "x", "reason": "  "}, "[0].reason: required"),
        ({"check": "x", "reason": "r"}, "[0].tool: required"),
        ({"tool": "t", "check": "x", "reason": "r", "why": "w"}, "unknown field(s) why"),
        ({"tool": "t", "check": "x", "reason": "r", "objects": "Deployment/("}, "[0].objects: not a regular"),
    ],
)
def test_an_exception_without_its_reason_or_with_a_bad_field_is_refused(tmp_path, entry, words) -> None:
    with pytest.raises(lint.ExceptionsError) as err:
        lint.load_exceptions(_exceptions(tmp_path, [entry]))
    assert words in str(err.value)


def test_findings_are_accepted_only_by_an_exception_that_matches_tool_check_object_and_message() -> None:
    finding = lint.Finding(
        "kube-score", "container-resources", "Deployment/vision", "tritonserver: CPU limit", "s"
    )
    accepts = lint.Exception_("kube-score", "container-resources", "r", "Deployment/vis.*", "CPU limit")
    others = [
        lint.Exception_("kubeconform", "container-resources", "r"),
        lint.Exception_("kube-score", "deployment-replicas", "r"),
        lint.Exception_("kube-score", "container-resources", "r", objects="Deployment/vis"),  # whole name
        lint.Exception_("kube-score", "container-resources", "r", message="Memory limit"),
    ]
    assert lint.judge([finding], others) == [finding]
    assert [e.used for e in others] == [0, 0, 0, 0]
    assert lint.judge([finding], [*others, accepts]) == []
    assert accepts.used == 1


def test_the_checked_in_exceptions_each_say_why() -> None:
    entries = lint.load_exceptions()
    assert entries and all(len(e.reason.split()) >= 10 for e in entries)
