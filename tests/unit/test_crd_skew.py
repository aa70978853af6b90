"""Version skew between the CRD and the operator (docs/concepts/validation.md, CRD evolution): an operator
never refuses, and never marks invalid, a pipeline because it holds fields a newer CRD defines. The API
server prunes every field its CRD does not define, after defaulting, so a field the operator does not
know in a stored object or an admission review is a newer CRD's: it is reported (SchemaCurrent=False,
NEWER_FIELDS_IGNORED, an admission warning) and ignored. A user's file (`validate`) still refuses an
unknown field: there it is a typo.

The other way (a newer operator reading objects stored under an older CRD) is
tests/component/test_crd_upgrade.py.
Here the pure tests; those on real components are in tests/component/test_crd_skew.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from support.crd_skew import FUTURE_FLAG, FUTURE_OBJECT, FUTURE_SETTING, with_future_fields
from support.webhook import cluster_doc, cyclic
from tritonpipeline.errors import SpecError
from tritonpipeline.render import conditions as st
from tritonpipeline.runtime import compiling
from tritonpipeline.spec import NEWER_FIELDS, parse_pipeline

# ------------------------------------------------------------------------------------ pure


def test_fields_a_newer_crd_defines_are_collected_not_refused() -> None:
    doc = cluster_doc("diamond", "d")
    newer: list[str] = []
    tp = parse_pipeline(with_future_fields(doc), newer=newer)
    assert tp.spec == parse_pipeline(doc).spec  # ignored: the spec means what it meant
    assert newer == [
        "spec.server.someFutureSetting",
        *(f"spec.models[{i}].futureFlag" for i in range(len(doc["spec"]["models"]))),
        "spec.futureObject",
    ]


def test_a_users_file_still_refuses_an_unknown_field() -> None:
    """`validate` (no `newer`): an unknown field in a file is a typo."""
    with pytest.raises(SpecError) as exc:
        parse_pipeline(with_future_fields(cluster_doc("diamond", "d")))
    paths = {p.path for p in exc.value.problems}
    assert {"spec.server.someFutureSetting", "spec.futureObject", "spec.models[0].futureFlag"} <= paths
    assert all(p.message.startswith("unknown field") for p in exc.value.problems)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d["spec"]["server"].update(replicas=-1), "spec.server.replicas"),
        # pass-through Kubernetes fields keep their own checks: an unknown key there is no CRD's field
        (
            lambda d: d["spec"]["server"].update(affinity={"nodeAfinity": {}}),
            "spec.server.affinity.nodeAfinity",
        ),
        (lambda d: d["spec"]["server"].update(resources={"limit": {}}), "spec.server.resources.limit"),
        (lambda d: d["spec"]["models"][0].update(backend="Python!"), "spec.models[0].backend"),
    ],
)
def test_only_unknown_fields_are_collected_every_other_problem_stays(
    mutate: Callable[[dict[str, Any]], None], path: str
) -> None:
    doc = with_future_fields(cluster_doc("diamond", "d"))
    mutate(doc)
    newer: list[str] = []
    with pytest.raises(SpecError) as exc:
        parse_pipeline(doc, newer=newer)
    assert [p.path for p in exc.value.problems] == [path]
    assert "spec.futureObject" in newer


def test_the_webhook_allows_fields_of_a_newer_crd_with_a_warning_naming_them() -> None:
    verdict = compiling.verdict(with_future_fields(cluster_doc("diamond", "d")))
    assert verdict.allowed, verdict.message()
    assert [str(w) for w in verdict.warnings] == [
        f"{FUTURE_SETTING}, {FUTURE_FLAG}, {FUTURE_OBJECT}: {NEWER_FIELDS}"
    ]
    assert not compiling.verdict(with_future_fields(cyclic())).allowed  # a real problem is still refused


def test_schema_condition_names_the_fields_once_each() -> None:
    fields = ["spec.server.someFutureSetting", "spec.models[0].futureFlag", "spec.models[1].futureFlag"]
    found = st.schema_condition(fields, 3)
    assert (found["type"], found["status"], found["reason"]) == (
        "SchemaCurrent",
        "False",
        "FieldsFromNewerSchema",
    )
    assert found["message"] == f"{FUTURE_SETTING}, {FUTURE_FLAG}: {NEWER_FIELDS}"
    assert st.schema_condition([], 3)["status"] == "True"
