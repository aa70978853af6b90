"""spec.server.args are read the way tritonserver reads them (getopt_long: `=` and space forms, unique
prefixes, ambiguous prefixes refused), so no form can override what the operator sets. The option
table is checked against the real binary's --help, and the parser against the binary's own verdicts;
`serve` passes the args to the local tritonserver.
Here the pure tests; those on real components are in tests/component/test_server_args.py."""

from __future__ import annotations

import pytest

from support.server_args import doc_with
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.render.manifests import render_children, triton_args
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline
from tritonpipeline.triton import tritonserver_options as opts
from tritonpipeline.triton.addresses import listen_args, url_host


def refused(args: list[str]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse_pipeline(doc_with(args))
    return [(p.path, p.message) for p in info.value.problems]


# --------------------------------------------------------------------------- reserved options


@pytest.mark.parametrize(
    ("args", "index", "option"),
    [
        (["--grpc-port 9001"], 0, "--grpc-port"),  # one string with a space: tritonserver's unknown option
        (["--grpc-p=9001"], 0, "--grpc-port"),  # a unique prefix is the option itself
        (["--log-verbose=1", "--grpc-port", "9001"], 1, "--grpc-port"),  # space form over two items
        (["--model-store=/elsewhere"], 0, "--model-repository"),  # the other name of the option
        (["--model-re", "/elsewhere"], 0, "--model-repository"),
        (["--http-port=80"], 0, "--http-port"),
        (["--metrics-p=1"], 0, "--metrics-port"),
        (["--allow-metrics=false"], 0, "--allow-metrics"),
        (["--allow-gpu=false"], 0, "--allow-gpu-metrics"),
        (["--strict-r=false"], 0, "--strict-readiness"),
        (["--allow-http=0"], 0, "--allow-http"),
        (["--help"], 0, "--help"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_reserved_options_are_refused_in_any_form(args: list[str], index: int, option: str) -> None:
    found = refused(args)
    assert [p for p, _ in found] == [f"spec.server.args[{index}]"], found
    assert option in found[0][1] and "cannot be given in server.args" in found[0][1]


@pytest.mark.parametrize(
    ("args", "index", "reason"),
    [
        (["--grpc=1"], 0, "ambiguous"),
        (["--strict=true"], 0, "ambiguous"),  # strict-readiness or strict-model-config
        (["--no-such-option=1"], 0, "no option --no-such-option"),
        (["--log-verbose"], 0, "needs a value"),
        (["--disable-auto-complete-config=true"], 0, "takes no value"),
        (["--exit-on-error=yes"], 0, "takes a boolean"),
        (["--log-verbose=high"], 0, "takes an integer"),
        (["--metrics-interval-ms=soon"], 0, "takes an integer"),  # --help says float; the binary reads an int
        (["--http-thread-count=2147483648"], 0, "from -2147483648 to 2147483647, got '2147483648'"),
        (["--min-supported-compute-capability=1e-400"], 0, "a number a double holds"),
        (["--model-control-mode=manual"], 0, "takes one of none, poll, explicit (any case), got 'manual'"),
        (["--log-format=iso8601"], 0, "takes one of default, ISO8601 (this case)"),
        (["--cache-config=size=1048576"], 0, "takes '<cache name>,<setting>=<value>', got 'size=1048576'"),
        (["--backend-config=,shm-default-byte-size=1"], 0, "'<backend name>,<setting>=<value>' or"),
        (["--host-policy=numa0"], 0, "takes '<policy name>,<setting>=<value>'"),
        (["--metrics-config", "summary,latencies=true"], 0, "takes '<setting>=<value>'"),
        (["--trace-config=jaeger,url=x"], 0, "trace mode 'jaeger' is none of triton, opentelemetry"),
        (["--trace-config=level=verbose"], 0, "level takes one of off, false, timestamps, tensors"),
        (["--trace-config=triton,log-frequency=often"], 0, "log-frequency takes an integer"),
        (["--rate-limit-resource=R"], 0, "'<resource name>:<count>' or '<resource name>:<count>:<device>'"),
        (["--rate-limit-resource=R:1:gpu0"], 0, "--rate-limit-resource device takes an integer"),
        (["--cuda-memory-pool-byte-size=1073741824"], 0, "takes '<GPU>:<bytes>', got '1073741824'"),
        (["--model-load-gpu-limit=0:most"], 0, "--model-load-gpu-limit fraction takes a number, got 'most'"),
        (["--model-config-name="], 0, "takes a non-empty value"),
        (["--load-model=a"], 0, "--load-model needs --model-control-mode=explicit"),
        (
            ["--load-model=a", "--model-control-mode=explicit", "--model-control-mode=poll"],
            0,
            "needs --model",
        ),
        (
            ["--cache-config=local,size=1", "--response-cache-byte-size=1"],
            1,
            "(spec.server.args[0]) are both given",
        ),
        (["--log-verbose=1", "stray"], 1, "not a --option"),
        (["-v"], 0, "not a --option"),
        (["--", "--log-verbose=1"], 0, "ends tritonserver's options"),
        (["--log-verbose 1"], 0, "space inside"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_what_tritonserver_refuses_is_refused(args: list[str], index: int, reason: str) -> None:
    found = refused(args)
    assert (f"spec.server.args[{index}]") in [p for p, _ in found], found
    assert any(reason in m for _, m in found), found


@pytest.mark.parametrize(
    "args",
    [
        ["--log-verbose", "1"],  # the space form, over two list items
        ["--log-verbose=1", "--exit-t=60"],
        ["--model-control-mode", "poll", "--repository-poll-secs=5"],
        ["--backend-config", "python,shm-default-byte-size=1048576"],
        ["--log-info", "ON", "--disable-auto-complete-config"],
        ["--id", "--looks-like-a-flag"],  # a value may start with '--'
        ["--log-verbose=true", "--http-thread-count=8threads"],  # stoi reads 8 and ignores the rest
        ["--model-control-mode=EXPLICIT", "--load-model=a", "--load-model=b"],
        [
            "--trace-config",
            "triton,file=/tmp/t.json",
            "--trace-config=level=TENSORS",
            "--trace-config=rate=10",
        ],
        ["--cache-config=local,size=1048576", "--host-policy=numa0,numa-node=0"],
    ],
    ids=lambda v: " ".join(v),
)
def test_valid_args_pass_and_reach_the_pod_unchanged(args: list[str]) -> None:
    tp = parse_pipeline(doc_with(args))
    assert triton_args(tp)[-len(args) :] == args


def test_a_dollar_in_the_args_reaches_tritonserver_as_written() -> None:
    """The kubelet expands `$(VAR)` in a container's args and reads `$$` as `$`: the Deployment carries
    each `$` of spec.server.args doubled, so an author's `$(TRITON_ADMIN_KEY)` stays those letters and
    the admin key never lands on Triton's command line; the operator's own `$(TRITON_ADMIN_KEY)` (the
    admin APIs' restriction) is still expanded."""
    args = ["--id=k$(TRITON_ADMIN_KEY)", "--log-verbose=1", "--backend-config=python,a=$$HOME$"]
    doc = doc_with(args)
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    tp = parse_pipeline(doc)
    deployment = render_children(tp, compile_pipeline(tp), Settings()).deployment
    (triton,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver"
    ]
    assert triton["args"][-3:] == [
        "--id=k$$(TRITON_ADMIN_KEY)",
        "--log-verbose=1",
        "--backend-config=python,a=$$$$HOME$$",
    ]
    restricted = [a for a in triton["args"] if "$(TRITON_ADMIN_KEY)" in a and "$$" not in a]
    assert restricted, triton["args"]  # the operator's own reference, expanded by the kubelet


def test_every_problem_is_reported_at_once() -> None:
    found = refused(["--grpc-p=1", "--log-verbose=1", "--http-port", "80", "--grpc=2"])
    assert [p for p, _ in found] == ["spec.server.args[0]", "spec.server.args[2]", "spec.server.args[4]"]


def test_serve_keeps_every_arg_but_those_it_sets_itself() -> None:
    args = ["--log-verbose", "1", "--http-address", "::", "--exit-t=3", "--id=a"]
    keep, left_out = opts.for_serve(args)
    assert keep == ["--log-verbose", "1", "--id=a"]
    assert [(f.index, f.option) for f, _ in left_out] == [(2, "http-address"), (4, "exit-timeout-secs")]


@pytest.mark.parametrize(
    ("args", "off"),
    [
        ([], None),
        (["--disable-auto-complete-config"], "--disable-auto-complete-config"),
        (["--disable-auto"], "--disable-auto"),  # a unique prefix is the option
        (["--strict-model-config=true"], "--strict-model-config=true"),
        (["--strict-model-config", "ON"], "--strict-model-config ON"),
        (["--strict-model-config=1", "--strict-model-config=false"], None),  # the last one counts
        (["--strict-model-config=false", "--disable-auto-complete-config"], "--disable-auto-complete-config"),
        (["--log-verbose=1", "--strict-model-config=0"], None),
    ],
)
def test_auto_complete_is_off_as_tritonserver_decides(args: list[str], off: str | None) -> None:
    """Read off tritonserver's command_line_parser.cc: --disable-auto-complete-config wins over any
    --strict-model-config; else the last --strict-model-config."""
    assert opts.auto_complete_off(args) == off


@pytest.mark.parametrize(
    ("host", "args", "url"),
    [
        ("127.0.0.1", ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"],
         "127.0.0.1"),
        ("0.0.0.0", ["--http-address=0.0.0.0", "--grpc-address=0.0.0.0", "--metrics-address=0.0.0.0"],
         "0.0.0.0"),
        ("::1", ["--http-address=ipv6:::1", "--grpc-address=[::1]", "--metrics-address=ipv6:::1"], "[::1]"),
        ("[::1]", ["--http-address=ipv6:::1", "--grpc-address=[::1]", "--metrics-address=ipv6:::1"], "[::1]"),
        ("::", ["--http-address=ipv6:::", "--grpc-address=[::]", "--metrics-address=ipv6:::"], "[::]"),
    ],
)  # fmt: skip
def test_each_tritonserver_endpoint_gets_an_address_in_the_form_it_reads(host, args, url) -> None:
    """HTTP and metrics read an IPv6 address as `ipv6:ADDR`, gRPC as `[ADDR]` (measured on the real
    server: tests/component/test_serve_cli.py serves on ::1); a URL puts IPv6 in brackets."""
    assert listen_args(host) == args
    assert url_host(host) == url
