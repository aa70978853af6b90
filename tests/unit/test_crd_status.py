"""The CRD's status schema (render/status_schema.py): typed and bounded at every level like the spec's, so
that no writer of the status subresource stores anything deeper or larger than the operator writes (issue 54),
while everything the operator writes fits: every status its builders make validates against the
generated schema, the free text it writes is cut to its bound with a marker, and on a real kube-apiserver
the operator's status is stored as written while an unknown, nested or oversized field is pruned or
refused. Here the pure tests; those on real components are in tests/component/test_crd_status.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from support.crd_status import (
    _pipeline,
    longest_names,
    schema_errors,
    status_schema,
    statuses,
    stream,
)
from tritonpipeline.errors import Problem, SpecError
from tritonpipeline.reconcile.pipeline import one_line
from tritonpipeline.render import conditions as st
from tritonpipeline.render import status_schema as ss
from tritonpipeline.render import triton_metrics as tm
from tritonpipeline.render.crd import crd
from tritonpipeline.spec import MODEL_NAME_RE, NAME_RE, parse_pipeline
from unit.test_crd import schema_nodes


def test_the_check_refuses_what_the_api_server_refuses_or_prunes() -> None:
    """The check is not vacuous: each bound and the unknown fields fail it."""
    schema = status_schema()
    ok = {"type": "Ready", "status": "True", "reason": "AllReplicasReady", "lastTransitionTime": st.now()}
    assert schema_errors(schema, {"conditions": [ok], "replicas": 1}) == []
    bad = [
        {"conditions": [{**ok, "message": "x" * (ss.MAX_TEXT + 1)}]},
        {"conditions": [{**ok, "type": f"T{i}"} for i in range(st.MAX_CONDITIONS + 1)]},
        {"conditions": [ok, ok]},
        {"conditions": [{**ok, "status": "Maybe"}]},
        {"conditions": [{**ok, "reason": "not a word"}]},
        {"conditions": [{**ok, "lastTransitionTime": "yesterday"}]},
        {"conditions": [{**ok, "extra": {"a": 1}}]},
        {"replicas": -1},
        {"graph": {"routerBackend": {"reason": 3}}},
        {"unknown": 1},
    ]
    for value in bad:
        assert schema_errors(schema, value), value


# --- 1. the schema: typed and bounded at every level ------------------------------------------------------


def _unbounded(schema: dict[str, Any]) -> Iterator[str]:
    """The nodes of `schema` that keep whatever is sent, or lack a type or a bound."""
    for path, node in schema_nodes(schema, "status"):
        kind = node.get("type")
        if node.get("x-kubernetes-preserve-unknown-fields") or kind is None:
            yield f"{path}: no type, or keeps whatever is sent"
        elif kind == "string" and "maxLength" not in node and "enum" not in node:
            yield f"{path}: a string without maxLength"
        elif kind == "array" and "maxItems" not in node:
            yield f"{path}: a list without maxItems"
        elif kind == "object" and "properties" not in node and "maxProperties" not in node:
            yield f"{path}: a map without maxProperties"


def test_every_field_of_the_status_is_typed_and_bounded() -> None:
    assert list(_unbounded(status_schema())) == []
    # and the generated CRD is the committed one (tests/unit/test_generated.py checks every generated file)
    committed = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert committed == status_schema()


def test_the_bounds_are_the_specs() -> None:
    for pattern in (NAME_RE, MODEL_NAME_RE):
        assert pattern.fullmatch("a" * ss.MAX_NAME)
        assert not pattern.fullmatch("a" * (ss.MAX_NAME + 1))
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    most = {spec["server"]["properties"]["replicas"]["maximum"]}
    most.add(spec["autoscaling"]["properties"]["maxReplicas"]["maximum"])
    assert {2 * m for m in most} == {ss.MAX_POD_ENTRIES}  # a rollout surges to twice the replicas at most
    # the operator's own condition types and reasons are far inside metav1.Condition's bounds
    assert len(st.CONDITION_TYPES) + 2 <= st.MAX_CONDITIONS // 2


def _paths(value: Any, path: str = "status") -> Iterator[str]:
    """The field paths `value` holds (list items as `name[]`)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            if sub is not None:
                yield f"{path}.{key}"
                yield from _paths(sub, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from _paths(item, f"{path}[]")


def test_every_status_the_operator_writes_fits_the_schema() -> None:
    """... and the samples write every field the schema has (none is there for nothing)."""
    schema = status_schema()
    written: set[str] = set()
    for what, status in statuses():
        assert schema_errors(schema, status) == [], what
        written |= set(_paths(status))
    assert written == set(_paths(_example(schema)))


def _example(schema: dict[str, Any]) -> Any:
    """A value with every field of `schema` (one item per list)."""
    if schema["type"] == "object":
        return {name: _example(sub) for name, sub in schema["properties"].items()}
    return [_example(schema["items"])] if schema["type"] == "array" else 0


def test_the_longest_names_reach_the_bounds_exactly() -> None:
    """The bounds are the spec's: the longest names fill them (a looser bound would hide a change)."""
    tp, graph = _pipeline(longest_names())
    (router,) = graph["routers"]
    assert len(router["source"]) == ss.MAX_REFERENCE
    assert max(len(c) for c in router["consumers"]) == ss.MAX_REFERENCE
    assert len(router["name"]) <= ss.MAX_ROUTER_NAME
    work = {m.name: tm.Work(tm.ModelTotals(1.0, 1.0, 1.0), 1.0) for m in tp.spec.models}
    bottleneck = tm.steps_status(tp, work)["bottleneck"]
    assert len(bottleneck) == status_schema()["properties"]["bottleneck"]["maxLength"]


def test_free_text_is_cut_to_its_bound_with_a_marker() -> None:
    assert st.fit("short") == "short"
    exact = "y" * st.MAX_MESSAGE
    assert st.fit(exact) == exact
    for length in (st.MAX_MESSAGE + 1, 5000, 10**6):
        cut = st.fit("z" * length)
        assert len(cut) <= st.MAX_MESSAGE
        marker = st.TRUNCATED.format(more=length - cut.index(" "))
        assert cut.endswith(marker), cut[-60:]
    problems = [Problem(f"spec.models[{i}].name", "a problem") for i in range(200)]
    invalid = st.condition("SpecValid", False, "InvalidSpec", one_line(SpecError(problems)), 1)
    assert len(invalid["message"]) <= st.MAX_MESSAGE
    assert invalid["message"].startswith("spec.models[0].name: a problem; ")
    assert re.search(r" … \[\d+ more characters\]$", invalid["message"])
    _, graph = _pipeline(longest_names())
    assert graph["routerBackend"]["reason"].endswith("more characters]")
    assert len(graph["routerBackend"]["reason"]) <= st.MAX_MESSAGE


def test_merged_conditions_stay_within_the_bound_keeping_the_operators() -> None:
    """Conditions another writer added (types a newer release writes, which an older operator keeps) make
    room for the operator's own: its status write is never refused for their number."""
    now = st.now()
    foreign = [
        {"type": f"Other{i}", "status": "True", "reason": "R", "lastTransitionTime": now} for i in range(40)
    ]
    written = [st.condition(ctype, True, "Configured", "ok", 1) for ctype in st.CONDITION_TYPES]
    merged = st.merge_conditions(foreign, written)
    assert len(merged) == st.MAX_CONDITIONS
    assert {c["type"] for c in written} <= {c["type"] for c in merged}
    kept = {c["type"] for c in merged if c["type"].startswith("Other")}
    assert kept == {f"Other{i}" for i in range(st.MAX_CONDITIONS - len(written))}  # the first, as stored
    assert st.merge_conditions(foreign[:3], written)[-3:] == foreign[:3]  # within the bound: all kept


def test_open_sequences_list_no_more_pods_than_the_bound() -> None:
    tp = parse_pipeline(stream())
    pods = {f"pod-{i:05d}": tm.Scrape(0.0, {}, 1) for i in range(ss.MAX_POD_ENTRIES + 5)}
    listed = tm.open_sequences_status(tp, pods)
    assert listed is not None and len(listed) == ss.MAX_POD_ENTRIES
    assert listed[0]["pod"] == "pod-00000"
