"""The CRD's status schema (render/status_schema.py): typed and bounded at every level like the spec's, so
that no writer of the status subresource stores anything deeper or larger than the operator writes (issue 54),
while everything the operator writes fits: every status its builders make validates against the
generated schema, the free text it writes is cut to its bound with a marker, and on a real kube-apiserver
the operator's status is stored as written while an unknown, nested or oversized field is pruned or
refused."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from harness.wait import wait_for
from helpers import ROOT, condition, imported_example
from test_crd import API, DEEP, KIND, collection_url, deep_text, example, raw, schema_nodes
from test_operator import events, wait_reconciled
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.router_choice import choose_router
from tritonpipeline.errors import Problem, SpecError
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.reconcile.pipeline import one_line
from tritonpipeline.reconcile.status_writer import replica_status
from tritonpipeline.render import conditions as st
from tritonpipeline.render import status_schema as ss
from tritonpipeline.render import triton_metrics as tm
from tritonpipeline.render.crd import crd
from tritonpipeline.render.manifests import endpoint
from tritonpipeline.spec import MODEL_NAME_RE, NAME_RE, TritonPipeline, parse_pipeline

CRD_FILE = ROOT / "crds" / "tritonpipelines.serving.tritonpipeline.io.yaml"


def status_schema() -> dict[str, Any]:
    """The status schema as committed (crds/, what helm installs)."""
    doc = yaml.safe_load(CRD_FILE.read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"])


# --- a check of the OpenAPI subset the status schema uses, as the API server applies it -----------------

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def _scalar_errors(schema: dict[str, Any], value: Any, at: str) -> Iterator[str]:
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            yield f"{at}: longer than {schema['maxLength']} ({len(value)})"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            yield f"{at}: {value!r} does not match {schema['pattern']}"
        if schema.get("format") == "date-time":
            try:
                dt.datetime.fromisoformat(value)
            except ValueError:
                yield f"{at}: {value!r} is not a date-time"
    if "enum" in schema and value not in schema["enum"]:
        yield f"{at}: {value!r} not in {schema['enum']}"
    if isinstance(value, (int, float)) and value < schema.get("minimum", value):
        yield f"{at}: {value} < {schema['minimum']}"


def schema_errors(schema: dict[str, Any], value: Any, at: str = "status") -> list[str]:
    """Why the API server would refuse `value` under `schema`, or prune part of it: a field the schema
    lacks is an error here, since the operator would have written what it cannot keep. None is absent (the
    API server drops a null)."""
    if value is None:
        return []
    if not _TYPES[schema["type"]](value):
        return [f"{at}: {value!r} is not {schema['type']}"]
    errors = list(_scalar_errors(schema, value, at))
    if isinstance(value, list):
        if len(value) > schema["maxItems"]:
            errors.append(f"{at}: more than {schema['maxItems']} items ({len(value)})")
        keys = [tuple(v.get(k) for k in schema.get("x-kubernetes-list-map-keys", ())) for v in value]
        if "x-kubernetes-list-map-keys" in schema and len(set(keys)) < len(keys):
            errors.append(f"{at}: duplicate keys {keys}")
        errors += [e for i, v in enumerate(value) for e in schema_errors(schema["items"], v, f"{at}[{i}]")]
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errors += [f"{at}: {k} missing" for k in schema.get("required", ()) if value.get(k) is None]
        errors += [f"{at}: unknown field {k}" for k in value if k not in props]
        errors += [e for k, v in value.items() if k in props for e in schema_errors(props[k], v, f"{at}.{k}")]
    return errors


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


# --- 2. every status the operator writes fits ---------------------------------------------------------


def _pipeline(doc: dict[str, Any]) -> tuple[TritonPipeline, dict[str, Any]]:
    """The parsed pipeline and its status.graph as the operator writes it."""
    tp = parse_pipeline(doc)
    return tp, st.graph_status(compile_pipeline(tp, router=choose_router(tp)).graph_summary())


def longest_names(namespace: str = "ns") -> dict[str, Any]:
    """examples/diamond.yaml with names and tensor names as long as the spec allows: a router whose source
    and consumers are the longest references, the longest bottleneck, and an image (no length limit) that
    makes the router choice's reason longer than the operator writes."""
    text = (ROOT / "examples" / "diamond.yaml").read_text()
    for old, new in (
        ("extractor", "e" * ss.MAX_NAME),
        ("extract", "s" * ss.MAX_NAME),
        ("FEATS_A", "F" * 256),
        ("FEATS_IN_B", "B" * 256),
        ("{name: left,", "{name: " + "l" * ss.MAX_NAME + ","),
        ("left.OUTPUT_B", "l" * ss.MAX_NAME + ".OUTPUT_B"),
        ("name: diamond", "name: " + "p" * ss.MAX_NAME),
    ):
        text = text.replace(old, new)
    doc = yaml.safe_load(text)
    doc["metadata"] = {"name": "d" * 63, "namespace": namespace}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"]["server"]["image"] = "registry." + "r" * 1500 + ".example/tritonserver:24.10-py3"
    doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 1000, "metric": "queueTime", "target": 50}
    return doc


def stream(namespace: str = "ns") -> dict[str, Any]:
    """examples/streaming.yaml with Stream routing: the status lists the open sequences per pod."""
    doc = example("streaming", namespace, "stream")
    doc["spec"]["routing"] = {"sessionAffinity": "Stream"}
    return doc


def documents() -> Iterator[dict[str, Any]]:
    for source in ("diamond", "fanout", "streaming"):
        yield example(source, "ns", source)
    yield stream()
    for name in ("tensorrtllm", "asr", "tutorials"):
        doc = imported_example(name)
        doc["metadata"] = {"name": name.lower(), "namespace": "ns"}
        yield doc
    yield longest_names()


def _pod(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


LONG = "x" * 5000  # a message someone else wrote (the scheduler, the kubelet, the API server)
PODS = [
    _pod(
        "a" * 253,
        initContainerStatuses=[
            {"name": "assemble", "state": {"terminated": {"exitCode": 1, "message": LONG}}}
        ],
    ),
    _pod("b", conditions=[{"type": "PodScheduled", "reason": "Unschedulable", "message": LONG}]),
]
DEPLOYMENT = {
    "metadata": {"generation": 4, "name": "p", "namespace": "ns"},
    "spec": {"replicas": 3},
    "status": {
        "observedGeneration": 4,
        "replicas": 4,
        "updatedReplicas": 1,
        "readyReplicas": 2,
        "conditions": [
            {"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": LONG},
            {"type": "ReplicaFailure", "status": "True", "message": LONG},
        ],
    },
}


def conditions(generation: int) -> Iterator[list[dict[str, Any]]]:
    """The operator's conditions in the scenarios that quote the most (each list one status write)."""
    problems = [Problem(f"spec.pipelines[0].steps[{i}].model", f"unknown model 'm{i}'") for i in range(99)]
    yield [
        st.condition("SpecValid", False, "InvalidSpec", one_line(SpecError(problems)), generation),
        st.condition("Ready", False, "InvalidSpec", "the spec is invalid; see SpecValid", generation),
    ]
    yield [
        st.schema_condition([f"spec.models[{i}].futureFlag{i}" for i in range(256)], generation),
        *st.ready_condition(
            4, 2, 1, 3, generation, LONG, ("CrashLoopBackOff", LONG), ("b", LONG), ("a", LONG)
        ),
    ]
    for pending, drained in ((("b", LONG), None), (None, ("a", LONG)), (None, None)):
        yield st.ready_condition(4, 2, 1, 3, generation, LONG, st.pod_problem(PODS), pending, drained)
    yield [st.condition(ctype, True, "Configured", LONG, generation) for ctype in st.CONDITION_TYPES]


def statuses() -> Iterator[tuple[str, dict[str, Any]]]:
    """(what, a status write) for every status the operator writes, with representative inputs."""
    for doc in documents():
        tp, graph = _pipeline(doc)
        name = doc["metadata"]["name"]
        work = {m.name: tm.Work(tm.ModelTotals(12.0, 3.0e9, 9.0e12), 1234.5) for m in tp.spec.models}
        pods = {f"{'p' * 240}-{i:05d}": tm.Scrape(0.0, {}, i) for i in range(ss.MAX_POD_ENTRIES + 10)}
        hpa = {"status": {"currentReplicas": 7, "desiredReplicas": 1000}}
        generation = 2**62
        replicas = replica_status(DEPLOYMENT, generation, [], PODS)
        yield (
            f"{name}: reconcile",
            {
                "observedGeneration": generation,
                "endpoint": endpoint(tp),
                "graph": graph,
                **replicas,
                "conditions": st.merge_conditions(None, replicas["conditions"]),
            },
        )
        yield (
            f"{name}: poll",
            {
                **tm.steps_status(tp, work),
                "openSequences": tm.open_sequences_status(tp, {**pods, "gone": None}),
                "autoscaler": tm.autoscaler_status(tp, hpa, "keda"),
            },
        )
        yield f"{name}: first poll", tm.steps_status(tp, None)
    merged: list[dict[str, Any]] = []
    for i, written in enumerate(conditions(7)):
        merged = st.merge_conditions(merged, written)
        yield f"conditions {i}", {"observedGeneration": 7, "conditions": merged}


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
