"""spec.server.tracing: Triton's request tracing through the spec (issue 55, point 5). The renderer
(compiler/tracing.py) writes Triton's own `--trace-config` flags into the cluster's Triton container and
`tritonpipeline serve`'s tritonserver; the spec refuses what Triton would not do, with field paths; the
collector's URL is an address the author chooses, reviewed like a KEDA trigger's (issue 54); and a real
tritonserver started by `serve` traces an inference: into Triton's trace file (mode triton), and as
spans POSTed to a loopback OTLP/HTTP receiver (mode opentelemetry).
Here the pure tests; those on real components are in tests/component/test_tracing.py."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from helpers import example
from tritonpipeline.compiler import compile_pipeline, tracing
from tritonpipeline.errors import SpecError
from tritonpipeline.render import reach as rc
from tritonpipeline.render.manifests import render_children, triton_args
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline
from tritonpipeline.triton import tritonserver_options

COLLECTOR = "http://otel-collector.observability.svc:4318/v1/traces"


def doc(tracing_spec: dict[str, Any] | None, args: list[str] | None = None) -> dict[str, Any]:
    d = example("fanout", uri="pvc://models/triton")
    d["metadata"] = {"name": "vision", "namespace": "team-a"}
    server = d["spec"].setdefault("server", {})
    if tracing_spec is not None:
        server["tracing"] = copy.deepcopy(tracing_spec)
    if args is not None:
        server["args"] = args
    return d


def trace_flags(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith("--trace-config")]


# ------------------------------------------------------------------------------------------ renderer


def test_opentelemetry_is_the_default_mode_and_every_setting_is_a_trace_config_flag():
    tp = parse_pipeline(
        doc({"url": COLLECTOR, "rate": 1, "count": 50, "resource": {"deployment.environment": "prod"}})
    )
    assert tracing.trace_args(tp.spec.server.tracing, "vision") == [
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        "--trace-config=count=50",
        f"--trace-config=opentelemetry,url={COLLECTOR}",
        "--trace-config=opentelemetry,resource=service.name=vision",
        "--trace-config=opentelemetry,resource=deployment.environment=prod",
    ]
    # the spec's service.name wins; Triton's default collector when no url is given
    tp = parse_pipeline(doc({"resource": {"service.name": "checkout-vision"}}))
    assert tracing.trace_args(tp.spec.server.tracing, "vision") == [
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1000",
        "--trace-config=opentelemetry,resource=service.name=checkout-vision",
    ]
    assert tracing.trace_args(None, "vision") == []


def test_mode_triton_writes_a_file_on_a_volume_of_its_own_in_the_pod():
    spec = {"mode": "triton", "level": ["TIMESTAMPS", "TENSORS"], "rate": 10, "logFrequency": 5}
    tp = parse_pipeline(doc(spec))
    assert tracing.trace_args(tp.spec.server.tracing, "vision", "/x/t.json") == [
        "--trace-config=mode=triton",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=level=TENSORS",
        "--trace-config=rate=10",
        "--trace-config=triton,file=/x/t.json",
        "--trace-config=triton,log-frequency=5",
    ]
    kids = render_children(tp, compile_pipeline(tp), Settings())
    pod = kids.deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert f"--trace-config=triton,file={tracing.TRACE_FILE}" in container["args"]
    assert {"name": "traces", "mountPath": tracing.TRACE_DIR} in container["volumeMounts"]
    assert {"name": "traces", "emptyDir": {"sizeLimit": "1Gi"}} in pod["volumes"]
    # no volume for OpenTelemetry, none without tracing
    for other in (doc({"url": COLLECTOR}), doc(None)):
        tp = parse_pipeline(other)
        pod = render_children(tp, compile_pipeline(tp), Settings()).deployment["spec"]["template"]["spec"]
        assert all(v["name"] != "traces" for v in pod["volumes"])


def test_the_pods_args_carry_the_flags_before_the_users_and_tritonserver_reads_them():
    """In the Triton container after the operator's own flags and before spec.server.args; each flag is
    one list item tritonserver's getopt_long reads without a problem; a `$` is doubled, so the kubelet
    expands no $(VAR) of the author's (the admin key's env var) into a URL or an attribute."""
    d = doc({"url": "http://c.example:4318/v1/traces?k=$(TRITON_ADMIN_KEY)", "resource": {"team": "$(HOME)"}})
    d["spec"]["server"]["args"] = ["--log-verbose=1"]
    tp = parse_pipeline(d)
    args = triton_args(tp)
    flags = trace_flags(args)
    assert args.index(flags[0]) > args.index("--strict-readiness=true")
    assert args[-1] == "--log-verbose=1"
    assert "--trace-config=opentelemetry,url=http://c.example:4318/v1/traces?k=$$(TRITON_ADMIN_KEY)" in flags
    assert "--trace-config=opentelemetry,resource=team=$$(HOME)" in flags
    rendered = tracing.trace_args(tp.spec.server.tracing, "vision")
    assert tritonserver_options.problems(rendered) == []  # read as tritonserver reads them
    triton_mode = parse_pipeline(doc({"mode": "triton", "level": ["OFF"], "logFrequency": 0, "count": 3}))
    assert tritonserver_options.problems(tracing.trace_args(triton_mode.spec.server.tracing, "v")) == []


# --------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("spec", "args", "path", "words"),
    [
        ({"url": "otel-collector:4318"}, None, "spec.server.tracing.url", "an http:// or https:// URL"),
        ({"url": "ftp://collector/v1/traces"}, None, "spec.server.tracing.url", "an http:// or https:// URL"),
        ({"rate": 0}, None, "spec.server.tracing.rate", "must be >= 1"),
        ({"rate": -5}, None, "spec.server.tracing.rate", "must be >= 1"),
        ({"count": 0}, None, "spec.server.tracing.count", "must be >= 1"),
        ({"level": ["VERBOSE"]}, None, "spec.server.tracing.level[0]", "'VERBOSE'"),
        ({"level": "TIMESTAMPS"}, None, "spec.server.tracing.level", "expected a list"),
        ({"level": []}, None, "spec.server.tracing.level", "at least 1 item"),
        (
            {"level": ["TENSORS"]},
            None,
            "spec.server.tracing.level",
            "mode opentelemetry traces TIMESTAMPS only",
        ),
        ({"mode": "triton", "level": ["OFF", "TENSORS"]}, None, "spec.server.tracing.level", "OFF alone"),
        (
            {"mode": "triton", "level": ["TENSORS", "TENSORS"]},
            None,
            "spec.server.tracing.level",
            "each level once",
        ),
        ({"mode": "jaeger"}, None, "spec.server.tracing.mode", "'jaeger'"),
        ({"mode": "triton", "url": COLLECTOR}, None, "spec.server.tracing.url", "mode opentelemetry only"),
        (
            {"mode": "triton", "resource": {"a": "b"}},
            None,
            "spec.server.tracing.resource",
            "mode opentelemetry only",
        ),
        ({"logFrequency": 10}, None, "spec.server.tracing.logFrequency", "mode triton only"),
        (
            {"resource": {"bad key": "v"}},
            None,
            "spec.server.tracing.resource.bad key",
            "resource attribute key",
        ),
        ({"resource": {"k": "a\nb"}}, None, "spec.server.tracing.resource.k", "control characters"),
        ({"sampler": "always"}, None, "spec.server.tracing.sampler", "unknown field"),
        ({}, ["--log-verbose=1", "--trace-config", "rate=1"], "spec.server.args[1]", "with server.tracing"),
        ({}, ["--trace-level=TIMESTAMPS"], "spec.server.args[0]", "with server.tracing"),
    ],
    ids=lambda v: None,
)
def test_a_bad_tracing_setting_is_refused_at_its_field(spec, args, path, words):
    with pytest.raises(SpecError) as info:
        parse_pipeline(doc(spec, args))
    found = {(p.path, p.message) for p in info.value.problems}
    assert any(p == path and words in m for p, m in found), found


def test_trace_flags_in_args_stay_allowed_without_the_tracing_field():
    tp = parse_pipeline(doc(None, ["--trace-config=rate=10", "--trace-config=level=TIMESTAMPS"]))
    assert trace_flags(triton_args(tp)) == ["--trace-config=rate=10", "--trace-config=level=TIMESTAMPS"]


# -------------------------------------------------------------------------------- the access review


def test_a_collector_url_the_author_chose_is_reviewed_unless_an_admin_lists_it():
    """Issue 54's rule for an address a tenant writes: the URL is an item at its field, allowed for an
    author who may create Deployments in the namespace (the SubjectAccessReview's attributes) or by
    security.allowedTraceCollectors; the same URL given through server.args is reviewed alike."""
    settings = Settings()
    for d, field in [
        (doc({"url": COLLECTOR}), "spec.server.tracing.url"),
        (doc(None, ["--trace-config", f"opentelemetry,url={COLLECTOR}"]), "spec.server.args[1]"),
        (doc(None, [f"--trace-config=opentelemetry,url={COLLECTOR}"]), "spec.server.args[0]"),
    ]:
        tp = parse_pipeline(d)
        (item,) = rc.trace_collectors(tp, settings)
        assert (item.field, item.listed) == (field, False)
        assert item.key == f"create deployments.apps team-a trace collector {COLLECTOR}"
        assert item.attributes() == {
            "namespace": "team-a",
            "verb": "create",
            "group": "apps",
            "resource": "deployments",
        }
        assert rc.allowed_by(item).endswith("(chart value security.allowedTraceCollectors)")
    listed = dataclasses.replace(
        settings, allowed_trace_collectors=("team-a/http://otel-collector.observability.svc:*",)
    )
    (item,) = rc.trace_collectors(parse_pipeline(doc({"url": COLLECTOR})), listed)
    assert item.listed
    elsewhere = dataclasses.replace(settings, allowed_trace_collectors=("team-b/http://otel-collector.*",))
    assert not rc.trace_collectors(parse_pipeline(doc({"url": COLLECTOR})), elsewhere)[0].listed
    # Triton's default collector (beside it in the pod) and mode triton reach nothing
    assert rc.trace_collectors(parse_pipeline(doc({})), settings) == []
    assert rc.trace_collectors(parse_pipeline(doc({"mode": "triton"})), settings) == []
