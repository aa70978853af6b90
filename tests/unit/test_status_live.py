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
