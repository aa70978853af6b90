"""spec.server.args are read the way tritonserver reads them (getopt_long: `=` and space forms, unique
prefixes, ambiguous prefixes refused), so no form can override what the operator sets. The option
table is checked against the real binary's --help, and the parser against the binary's own verdicts;
`serve` passes the args to the local tritonserver."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import CLI, ROOT
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.local.tritonserver import LocalTriton, TritonError, free_ports, server_env, server_home
from tritonpipeline.render.manifests import render_children, triton_args
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline
from tritonpipeline.triton import tritonserver_options as opts
from tritonpipeline.triton.addresses import listen_args, url_host


def doc_with(args: list[str]) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "fanout.yaml").read_text()))
    doc["spec"]["server"]["args"] = args
    return doc


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


# --------------------------------------------------------------------------- against the real binary


def _tritonserver(*args: str) -> str:
    binary = server_home() / "bin" / "tritonserver"
    result = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, env=server_env(), timeout=60, check=False
    )
    return result.stdout + result.stderr


@pytest.mark.tritonserver
def test_option_table_is_the_binarys_help() -> None:
    listed = {
        m[1]: m[2] or ""
        for m in re.finditer(r"^  --([a-z0-9-]+)(?: <(.*)>)?$", _tritonserver("--help"), re.MULTILINE)
    }
    assert listed, "tritonserver --help listed no options"
    assert listed == opts.OPTIONS


# argument lists and whether tritonserver's own parser takes them (without starting a server: a
# trailing --help is reached only when everything before it parsed)
BINARY_CASES = [
    ["--grpc-p=9001"],
    ["--grpc-port 9001"],
    ["--grpc", "1"],
    ["--model-", "/x"],
    ["--model-s=/x"],
    ["--exit-t=3"],
    ["--strict-readiness=yes"],
    ["--strict-readiness=ON"],
    ["--log-verbose=abc"],
    ["--log-verbose", "7"],
    ["--log-verbose", "--x"],
    ["--disable-auto-complete-config=1"],
    ["--disable-auto-complete-config"],
    ["--metrics-interval-ms=abc"],
    ["--metrics-interval-ms=2.5"],
    ["--backend-config=python,a=b"],
    ["-v"],
    # numbers as std::stoi, stoll, stoull and stod read them: blanks, a sign, digits, the rest ignored
    *(
        [f"--http-thread-count={v}"]
        for v in ("2147483647", "2147483648", "-2147483649", " 5", "+5", "0x10", "", "5abc", "x5")
    ),
    *([f"--log-verbose={v}"] for v in ("true", "TRUE", "on", "2x", "99999999999", "-1")),
    *([f"--metrics-interval-ms={v}"] for v in ("1e400", "inf", ".5", "-3", "99999999999")),
    *(
        [f"--pinned-memory-pool-byte-size={v}"]
        for v in ("99999999999", "9223372036854775807", "9223372036854775808", "-5")
    ),
    *(
        [f"--min-supported-compute-capability={v}"]
        for v in (
            "7.5",
            "1.e5",
            " .5",
            ".",
            "1e400",
            "1e-400",
            "1e-310",
            "0e-400",
            "0x1p3",
            "0x1p99999",
            "0x",
            "infinity",
            "-inf",
            "nan(abc)",
            "e5",
        )
    ),
    # words
    *([f"--model-control-mode={v}"] for v in ("EXPLICIT", "Poll", "manual")),
    *([f"--rate-limit={v}"] for v in ("Execution_Count", "OFF", "on")),
    *([f"--log-format={v}"] for v in ("ISO8601", "iso8601", "default", "DEFAULT")),
    *([f"--grpc-infer-response-compression-level={v}"] for v in ("HIGH", "none", "max")),
    *([f"--trace-level={v}"] for v in ("TENSORS", "min", "false", "all")),
    ["--model-config-name="],
    ["--model-config-name=a.pbtxt"],
    # [<name>,]<setting>=<value> forms
    *(
        [f"--cache-config={v}"]
        for v in (
            "local,size=1",
            "size=1",
            ",size=1",
            "local,size=",
            "local,=1",
            "local",
            "a,b,c=d",
            "a,=b=c",
        )
    ),
    *(
        [f"--backend-config={v}"]
        for v in ("a=b", ",a=b", "python,a", "python,=b", "x", "a,b=c=d", "a=b,c", "python,a=")
    ),
    *([f"--host-policy={v}"] for v in ("n,a=b", "a=b", "n,a=", ",a=b", "n,a=b=c", "n,=b")),
    *([f"--metrics-config={v}"] for v in ("a=b", "x,a=b", "a=", "a=b,c", "a=b=c", "=b")),
    *(
        [f"--trace-config={v}"]
        for v in ("rate=1", "triton,file=x", "OPENTELEMETRY,url=x", "bogus,a=b", ",a=b", "triton,a", "a=b")
    ),
    # <a>:<b> forms
    *([f"--rate-limit-resource={v}"] for v in ("R:1", "R:1:0", "R:x", "R", "R:1:2:3", ":1", "R:1:", "R::")),
    *(
        [f"--cuda-memory-pool-byte-size={v}"]
        for v in ("0:100", "0:-1", "x:1", "0", "0:18446744073709551616", "0:-18446744073709551615", "0:")
    ),
    ["--cuda-memory-pool-byte-size=2147483648:1"],
    ["--cuda-virtual-address-size=0:100"],
    *([f"--model-load-gpu-limit={v}"] for v in ("0:0.5", "0:x", "0:1e400", "0.5")),
    *([f"--sagemaker-safe-port-range={v}"] for v in ("1-2", "1:2", "-1-5", "1-")),
]


def _takes(output: str, usage: str) -> bool:
    """Whether tritonserver read every option before `--help`: its usage alone, after the warnings a
    deprecated option prints."""
    lines = output.splitlines(keepends=True)
    while lines and lines[0].startswith("Warning: "):
        lines.pop(0)
    return "".join(lines) == usage


@pytest.mark.tritonserver
@pytest.mark.parametrize("args", BINARY_CASES, ids=lambda v: " ".join(v))
def test_parser_agrees_with_tritonserver(args: list[str]) -> None:
    output = _tritonserver(*args, "--help")
    _, problems = opts.parse(args)
    assert (not problems) == _takes(output, _tritonserver("--help")), (problems, output[-400:])


# what tritonserver refuses only once it has read every option (`--help` ends the reading before it)
STARTED_CASES = [
    (["--trace-config=level=TENSORS", "--trace-config=rate=10"], True),
    (["--trace-level=off", "--trace-config=level=TIMESTAMPS"], True),
    (["--trace-config=level=verbose"], False),
    (["--trace-config=rate=often"], False),
    (["--trace-config=count=x"], False),
    (["--trace-config=mode=jaeger"], False),
    (["--trace-config=triton,log-frequency=x"], False),
    (["--load-model=a"], False),
    (["--load-model=a", "--model-control-mode=explicit", "--model-control-mode=none"], False),
    (["--response-cache-byte-size=0", "--cache-config=local,size=1"], False),
    (["--model-control-mode=poll", "--repository-poll-secs=3"], True),
]


def _starts(args: list[str], repository: Path) -> tuple[bool, str]:
    """Whether tritonserver, given `args` and an empty repository on loopback, serves rather than
    exiting; what it printed."""
    server = LocalTriton(repository, extra_args=args)
    try:
        server.start().wait_ready(timeout=60)
        return True, server.logs()
    except TritonError:
        return False, server.logs()
    finally:
        server.stop()


@pytest.mark.tritonserver
@pytest.mark.parametrize(
    ("args", "starts"), STARTED_CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_what_tritonserver_refuses_as_it_starts_is_refused(
    args: list[str], starts: bool, tmp_path: Path
) -> None:
    (tmp_path / "models").mkdir()
    started, output = _starts(args, tmp_path / "models")
    assert started == starts, output[-600:]
    assert (not opts.problems(args)) == starts, opts.problems(args)


# --------------------------------------------------------------------------- serve applies them


@pytest.mark.tritonserver
@pytest.mark.cli
def test_serve_passes_server_args_to_the_local_tritonserver(tmp_path: Path) -> None:
    doc = doc_with(["--id", "tp-args-check", "--http-address=0.0.0.0", "--log-verbose=1"])
    doc["spec"]["modelRepository"]["uri"] = str(ROOT / "model_repository")
    cr = tmp_path / "cr.yaml"
    cr.write_text(yaml.safe_dump(doc))
    http, grpc, metrics = free_ports(3)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    proc = subprocess.Popen(
        [str(CLI), "serve", str(cr), "--cpu", *ports],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (lines and lines[-1].startswith("serving;")):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        text = "".join(lines)
        assert "serving;" in text, text
        assert (
            "note: spec.server.args[2] --http-address=0.0.0.0 is not used locally (serve binds --host)"
            in text
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2", timeout=5) as resp:
            assert json.loads(resp.read())["name"] == "tp-args-check"  # --id reached tritonserver
    finally:
        proc.terminate()
        proc.wait(timeout=60)


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
