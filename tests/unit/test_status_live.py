"""The status users act on (render/triton_metrics.py, reconcile/live.py): per step queue and compute time
from a real tritonserver's /metrics after real requests, and the autoscaler's replicas copied by the
operator from an HPA status written through the real apiserver.
Here the pure tests; those on real components are in tests/component/test_status_live.py."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import cluster_doc, example
from support.status_live import stream_doc
from tritonpipeline.compiler import (
    OPEN_STREAMS_GAUGE,
    OPEN_STREAMS_MODEL,
    compile_pipeline,
    open_streams_source,
)
from tritonpipeline.errors import SpecError
from tritonpipeline.render import triton_metrics as tm
from tritonpipeline.spec import parse_pipeline


def test_steps_before_two_scrapes_have_no_numbers():
    status = tm.steps_status(parse_pipeline(example("diamond")), None)
    assert status["bottleneck"] is None and status["steps"]
    assert all(set(s) == {"pipeline", "step", "model"} for s in status["steps"])


def test_prometheus_text_that_is_not_metrics_is_refused():
    with pytest.raises(ValueError):
        tm.read_scrape("<html>not metrics</html>\n", 0)


def test_a_page_with_more_series_than_triton_writes_is_refused():
    """A tenant's pod serves what it likes on port 8002 (issue 54); the bytes are capped where they are
    read (reconcile/live.py), the series here."""
    line = 'nv_inference_request_success{model="m%d",version="1"} 1\n'
    text = "".join(line % i for i in range(tm.MAX_SERIES))
    assert len(tm.read_scrape(text, 0).models) == tm.MAX_SERIES
    with pytest.raises(ValueError, match=tm.TOO_MANY_SERIES):
        tm.read_scrape(text + line % -1, 0)


def test_network_policy_lets_the_operator_read_metrics():
    from tritonpipeline.render.access import network_policy
    from tritonpipeline.settings import Settings

    ops = Settings(operator_namespace="ops", operator_labels=(("app", "op"),))
    operator = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
        "podSelector": {"matchLabels": {"app": "op"}},
    }
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}

    def metrics_peers(policy: dict[str, Any], settings: Settings) -> list[Any]:
        doc = cluster_doc("vision", "ml")
        doc["spec"]["networkPolicy"] = policy
        rendered = network_policy(parse_pipeline(doc), settings)
        assert rendered is not None
        return [r["from"] for r in rendered["spec"]["ingress"] if r["ports"][0]["port"] == 8002]

    assert metrics_peers({}, ops) == [[{"podSelector": {}}, operator]]
    assert metrics_peers({"metrics": [prom]}, ops) == [[prom, operator]]
    assert metrics_peers({"metrics": []}, ops) == []  # nobody means nobody
    assert metrics_peers({"metrics": [prom]}, Settings()) == [[prom]]  # outside the chart: unknown


def test_the_gauge_model_only_with_stream_routing():
    stream = compile_pipeline(parse_pipeline(stream_doc()), cpu_only=True).files
    assert stream[f"{OPEN_STREAMS_MODEL}/1/model.py"] == open_streams_source()
    assert f"GAUGE = {OPEN_STREAMS_GAUGE!r}".replace("'", '"').encode() in open_streams_source()
    header = compile_pipeline(parse_pipeline(example("streaming")), cpu_only=True).files
    assert not any(path.startswith(OPEN_STREAMS_MODEL) for path in header)
    assert tm.open_sequences_status(parse_pipeline(example("streaming")), {"p": None}) is None


def test_the_gauge_models_name_is_reserved_with_stream_routing():
    doc = stream_doc()
    doc["spec"]["models"][0]["name"] = OPEN_STREAMS_MODEL
    doc["spec"]["pipelines"][0]["steps"][0]["model"] = OPEN_STREAMS_MODEL
    with pytest.raises(SpecError) as err:
        compile_pipeline(parse_pipeline(doc))
    (reserved,) = [p for p in err.value.problems if p.path == "spec.models[0].name"]
    assert "reserved for the open-streams gauge" in str(reserved)


def _totals(**inferences: float) -> dict[str, tm.ModelTotals]:
    return {model: tm.ModelTotals(requests=n, inferences=n) for model, n in inferences.items()}


def _conditions() -> list[dict[str, Any]]:
    from tritonpipeline.render.conditions import graph_status

    graph = graph_status(compile_pipeline(parse_pipeline(example("conditional"))).graph_summary())
    return list(graph["conditions"])


def test_branch_traffic_sums_each_branch_over_the_pods():
    """Two pods: each branch's inferences added up, the pipeline's too, and the inferences that took no
    branch (the example's `conditional`: labels other than 0 and 1) where no request takes two."""
    first = tm.Scrape(0.0, _totals(conditional=10, conditional__when0=6, conditional__when1=3))
    second = tm.Scrape(
        0.0, _totals(conditional=5, conditional__when0=1, conditional__when1=4, switched=2, switched__when0=2)
    )
    traffic = tm.branch_traffic_status(_conditions(), {"p-0": first, "p-1": second}, None)
    assert traffic == [
        {
            "pipeline": "conditional",
            "inferences": 15,
            "noBranch": 1,
            "branches": [
                {
                    "model": "conditional__when0",
                    "condition": "classify.LABEL equals 0",
                    "steps": ["small"],
                    "inferences": 7,
                },
                {
                    "model": "conditional__when1",
                    "condition": "classify.LABEL equals 1",
                    "steps": ["large", "score"],
                    "inferences": 7,
                },
            ],
        },
        {
            "pipeline": "switched",
            "inferences": 2,
            "noBranch": 0,  # a model a pod has not served yet counts 0 there
            "branches": [
                {
                    "model": "switched__when0",
                    "condition": "no case of the switch on classify.LABEL holds",
                    "steps": ["small"],
                    "inferences": 2,
                },
                {
                    "model": "switched__when1",
                    "condition": "classify.LABEL equals 1",
                    "steps": ["large"],
                    "inferences": 0,
                },
            ],
        },
    ]


def test_branch_traffic_rates_and_what_is_not_known():
    conditions = _conditions()[:1]
    before = tm.Scrape(0.0, _totals(conditional=10, conditional__when0=6, conditional__when1=4))
    after = tm.Scrape(2.0, _totals(conditional=16, conditional__when0=7, conditional__when1=9))
    traffic = tm.branch_traffic_status(conditions, {"p": after}, tm.pipeline_work([(before, after)]))
    assert traffic is not None
    assert traffic[0]["inferencesPerSecond"] == 3.0
    assert [b["inferencesPerSecond"] for b in traffic[0]["branches"]] == [0.5, 2.5]
    # no pod read yet: the branches listed without numbers, not zeros
    (unread,) = tm.branch_traffic_status(conditions, {}, None) or []
    assert set(unread) == {"pipeline", "branches"}
    assert all(set(b) == {"model", "condition", "steps"} for b in unread["branches"])
    # a branch's counter is read before its pipeline's has moved: never below zero
    racing = tm.Scrape(0.0, _totals(conditional=3, conditional__when0=2, conditional__when1=2))
    assert (tm.branch_traffic_status(conditions, {"p": racing}, None) or [])[0]["noBranch"] == 0
    # where two branches may both hold, the requests that took none are not known
    shared = [{**conditions[0], "exclusive": False}]
    assert "noBranch" not in (tm.branch_traffic_status(shared, {"p": after}, None) or [{}])[0]
    # no conditions: no field
    assert tm.branch_traffic_status(None, {"p": after}, None) is None
    assert tm.branch_traffic_status([], {"p": after}, None) is None


def test_branch_traffic_is_not_rewritten_while_idle():
    """Idle polls give the same status (reconcile/status_writer.py then writes nothing); the first poll
    after traffic gives new numbers."""
    from tritonpipeline.render.conditions import status_changed

    conditions = _conditions()
    one = tm.Scrape(0.0, _totals(conditional=4, conditional__when0=4))
    two = tm.Scrape(30.0, one.models)
    three = tm.Scrape(60.0, one.models)
    written = {
        "branchTraffic": tm.branch_traffic_status(conditions, {"p": two}, tm.pipeline_work([(one, two)]))
    }
    idle = {
        "branchTraffic": tm.branch_traffic_status(conditions, {"p": three}, tm.pipeline_work([(two, three)]))
    }
    assert not status_changed(written, idle)
    busy = tm.Scrape(90.0, _totals(conditional=5, conditional__when0=5))
    moved = {
        "branchTraffic": tm.branch_traffic_status(conditions, {"p": busy}, tm.pipeline_work([(three, busy)]))
    }
    assert status_changed(idle, moved)


def test_the_inference_count_is_read_per_model():
    text = (
        'nv_inference_request_success{model="b",version="1"} 3\n'
        'nv_inference_count{model="b",version="1"} 5\n'
        'nv_inference_count{model="b",version="2"} 1\n'
    )
    assert tm.read_scrape(text, 0).models["b"] == tm.ModelTotals(requests=3, inferences=6)


def test_a_speculative_branchs_count_is_the_switchs():
    """A speculative branch's ensemble is never called: the switch counts the rows taking it
    (tritonpipeline_branch_taken, written as Triton writes its own counters), read as its inferences; a
    count that went down is a restarted server, as with Triton's own counters."""
    text = (
        "# HELP tritonpipeline_branch_taken Rows of the requests that took a speculative branch\n"
        "# TYPE tritonpipeline_branch_taken counter\n"
        'tritonpipeline_branch_taken{model="p__when1"} 7\n'
        'nv_inference_count{model="p__when1",version="1"} 0\n'
    )
    taken = tm.read_scrape(text, 0)
    assert taken.models["p__when1"] == tm.ModelTotals(inferences=7)
    restarted = tm.read_scrape(text.replace("} 7", "} 2"), 30)
    assert tm.difference(taken, restarted)["p__when1"].inferences == 2
