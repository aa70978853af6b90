"""The CRD's status schema (render/status_schema.py): typed and bounded at every level like the spec's, so
that no writer of the status subresource stores anything deeper or larger than the operator writes (issue 54),
while everything the operator writes fits: every status its builders make validates against the
generated schema, the free text it writes is cut to its bound with a marker, and on a real kube-apiserver
the operator's status is stored as written while an unknown, nested or oversized field is pruned or
refused. Here the tests on real components; the pure ones are in tests/unit/test_crd_status.py."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from component.test_crd import DEEP, collection_url, deep_text, raw
from component.test_operator import events, wait_reconciled
from harness.wait import wait_for
from helpers import condition
from support.crd import API, KIND, example
from support.crd_status import (
    _pipeline,
    longest_names,
    schema_errors,
    status_schema,
    statuses,
)
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.render import conditions as st
from tritonpipeline.render import status_schema as ss
from tritonpipeline.render.manifests import endpoint

# --- 3. on a real kube-apiserver ---------------------------------------------------------------------------


def _status_url(namespace: str, name: str = "subject") -> str:
    return f"{collection_url(namespace)}/{name}/status"


def _merge(kube: Kube, namespace: str, status: dict[str, Any]) -> tuple[int, Any]:
    body = {"status": status}
    url = _status_url(namespace)
    return raw(kube, "PATCH", url, body=body, content_type="application/merge-patch+json")


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


@pytest.fixture
def stored(kube: Kube, namespace: str) -> str:
    """A namespace with a pipeline, `subject`, to write the status of (examples/fanout.yaml)."""
    kube.apply(example("fanout", namespace))
    return namespace


@pytest.mark.apiserver
def test_the_operators_status_is_stored_as_written(kube: Kube, stored: str) -> None:
    """Each status write of the operator's, at the bounds, comes back as sent: nothing pruned or cut."""
    sent: dict[str, Any] = {}
    for what, status in statuses():
        code, obj = _merge(kube, stored, status)
        assert code == 200, (what, obj)
        sent = {**sent, **status}
        assert obj["status"] == _without_nulls(sent), what


@pytest.mark.apiserver
def test_a_field_the_status_schema_lacks_is_pruned_however_deep(kube: Kube, stored: str) -> None:
    """1,500 levels of nesting under status, at the top, in a condition and in the graph: refused under
    strict field validation (kubectl's default), pruned otherwise (an update of the status subresource, sent
    as YAML, which the client passes on unencoded)."""
    ready = {"type": "Ready", "status": "True", "reason": "AllReplicasReady", "lastTransitionTime": st.now()}
    obj = kube.get(API, KIND, stored, "subject")
    assert obj is not None
    meta = obj["metadata"]
    doc = {
        "apiVersion": API,
        "kind": KIND,
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion")},
        "spec": obj["spec"],
        "status": {
            "replicas": 1,
            "conditions": [{**ready, "extra": DEEP}],
            "graph": {"ensembles": [{"name": "e"}], "hidden": DEEP},
            "anything": DEEP,
        },
    }
    url, text = _status_url(stored), deep_text(doc)
    strict = [("fieldValidation", "Strict")]
    code, message = raw(kube, "PUT", url, query=strict, body=text, content_type="application/yaml")
    assert code == 400 and 'unknown field "status.anything"' in message, message
    assert 'unknown field "status.conditions[0].extra"' in message, message
    code, updated = raw(kube, "PUT", url, body=text, content_type="application/yaml")
    assert code == 200, updated
    got = kube.get(API, KIND, stored, "subject")
    assert got is not None
    assert got["status"] == {"replicas": 1, "conditions": [ready], "graph": {"ensembles": [{"name": "e"}]}}


@pytest.mark.apiserver
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            {"conditions": [{"type": "Ready", "status": "True", "message": "m" * (ss.MAX_TEXT + 1)}]},
            "Too long",
        ),
        (
            {"conditions": [{"type": f"T{i}", "status": "True"} for i in range(st.MAX_CONDITIONS + 1)]},
            f"must have at most {st.MAX_CONDITIONS} items",
        ),
        ({"conditions": [{"type": "Ready", "status": "True"}] * 2}, "Duplicate value"),
        ({"conditions": [{"type": "Ready", "status": "Maybe"}]}, "Unsupported value"),
        ({"conditions": [{"type": "Ready", "status": "True", "reason": "not a word"}]}, "should match"),
        ({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "x"}]}, "date-time"),
        ({"readyReplicas": -1}, "should be greater than or equal to 0"),
        ({"endpoint": {"a": {"b": 1}}}, "must be of type string"),
        ({"steps": [{"pipeline": "p", "step": "s", "model": "m"}] * (ss.MAX_STEP_ENTRIES + 1)}, "Too many"),
        ({"graph": {"routerBackend": {"reason": "r" * (ss.MAX_TEXT + 1)}}}, "Too long"),
    ],
    ids=[
        "message",
        "conditions",
        "duplicate",
        "enum",
        "reason",
        "time",
        "negative",
        "nested",
        "steps",
        "choice",
    ],
)
def test_a_value_out_of_bounds_is_refused(
    kube: Kube, stored: str, status: dict[str, Any], expected: str
) -> None:
    code, message = _merge(kube, stored, status)
    assert code == 422 and expected in message, message
    got = kube.get(API, KIND, stored, "subject")
    assert got is not None and not got.get("status"), got.get("status")


def _invalid(namespace: str) -> dict[str, Any]:
    """A pipeline the CRD admits whose spec error lists more than the operator writes: a step of an
    unknown model in each of its pipelines' places."""
    doc = example("diamond", namespace, "broken")
    steps = doc["spec"]["pipelines"][0]["steps"]
    steps += [{"name": f"ghost{i}", "model": f"missing_model_{i}"} for i in range(40)]
    return doc


@pytest.mark.apiserver
def test_the_operator_status_is_stored_intact_and_fits(kube: Kube, namespace: str, run_operator: Any) -> None:
    """The operator's own writes on a real API server: a pipeline at the bounds (the longest names, an image
    longer than the router choice's reason may be) and an invalid one whose problems outrun a message.
    What is stored is what the operator computes (nothing pruned, nothing refused), and fits the schema;
    the cut message warns once, not at every resync (compared as stored)."""
    run_operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    doc = longest_names(namespace)
    kube.apply(doc)
    kube.apply(_invalid(namespace))
    name = doc["metadata"]["name"]
    cr = wait_reconciled(kube, namespace, name)
    status = cr["status"]
    assert schema_errors(status_schema(), status) == []
    tp, graph = _pipeline(doc)
    assert status["graph"] == graph
    assert status["endpoint"] == endpoint(tp)
    assert graph["routerBackend"]["reason"].endswith("more characters]")
    types = {c["type"] for c in status["conditions"]}
    assert {"SpecValid", "SchemaCurrent", "ModelsConfigured", "Ready", "Progressing", "UpToDate"} <= types

    broken = wait_reconciled(kube, namespace, "broken")
    assert schema_errors(status_schema(), broken["status"]) == []
    valid = condition(broken, "SpecValid") or {}
    assert valid["status"] == "False", valid
    assert len(valid["message"]) <= st.MAX_MESSAGE
    assert re.search(r" … \[\d+ more characters\]$", valid["message"]), valid["message"][-80:]

    def warned() -> list[dict[str, Any]]:
        return [e for e in events(kube, namespace, "broken") if e["reason"] == "InvalidSpec"]

    wait_for("the InvalidSpec Warning event", warned)
    time.sleep(3)  # three resyncs, each finding the same problems
    assert len(warned()) == 1, [e["message"][:80] for e in warned()]
    assert condition(kube.get(API, KIND, namespace, "broken") or {}, "SpecValid") == valid  # not rewritten
