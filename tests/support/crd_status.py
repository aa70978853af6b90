"""What tests/unit/test_crd_status.py and tests/component/test_crd_status.py share."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

import yaml

from helpers import ROOT, imported_example, speculative
from support.crd import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.router_choice import choose_router
from tritonpipeline.errors import Problem, SpecError
from tritonpipeline.reconcile.pipeline import one_line
from tritonpipeline.reconcile.status_writer import replica_status
from tritonpipeline.render import conditions as st
from tritonpipeline.render import status_schema as ss
from tritonpipeline.render import triton_metrics as tm
from tritonpipeline.render.manifests import endpoint
from tritonpipeline.spec import TritonPipeline, parse_pipeline

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
    "boolean": lambda v: isinstance(v, bool),
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
    for source in ("diamond", "fanout", "streaming", "conditional"):
        yield example(source, "ns", source)
    yield speculative(example("conditional", "ns", "speculative"))  # status.graph.conditions[].speculative
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
        counted = tm.ModelTotals(12.0, 3.0e9, 9.0e12, 2.0**53)
        served = [*(m.name for m in tp.spec.models), *(p.name for p in tp.spec.pipelines)]
        served += [b["model"] for c in graph.get("conditions", []) for b in c["branches"]]
        work = {model: tm.Work(counted, 1234.5, 9876.5) for model in served}
        scrapes = {f"p-{i}": tm.Scrape(0.0, {model: counted for model in served}) for i in range(3)}
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
                "branchTraffic": tm.branch_traffic_status(graph.get("conditions"), scrapes, work),
                "openSequences": tm.open_sequences_status(tp, {**pods, "gone": None}),
                "autoscaler": tm.autoscaler_status(tp, hpa, "keda"),
            },
        )
        yield f"{name}: first poll", tm.steps_status(tp, None)
    merged: list[dict[str, Any]] = []
    for i, written in enumerate(conditions(7)):
        merged = st.merge_conditions(merged, written)
        yield f"conditions {i}", {"observedGeneration": 7, "conditions": merged}
