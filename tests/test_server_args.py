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
from tritonpipeline.errors import SpecError
from tritonpipeline.kube.manifests import triton_args
from tritonpipeline.local.server import free_ports, server_env, server_home
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
        (["--metrics-interval-ms=soon"], 0, "takes a number"),
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
    ],
    ids=lambda v: " ".join(v),
)
def test_valid_args_pass_and_reach_the_pod_unchanged(args: list[str]) -> None:
    tp = parse_pipeline(doc_with(args))
    assert triton_args(tp)[-len(args) :] == args


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
]


@pytest.mark.tritonserver
@pytest.mark.parametrize("args", BINARY_CASES, ids=lambda v: " ".join(v))
def test_parser_agrees_with_tritonserver(args: list[str]) -> None:
    usage = _tritonserver("--help")
    binary_takes_it = _tritonserver(*args, "--help") == usage
    _, problems = opts.parse(args)
    assert (not problems) == binary_takes_it, (problems, _tritonserver(*args, "--help")[-400:])


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
    server: tests/test_serve_cli.py serves on ::1); a URL puts IPv6 in brackets."""
    assert listen_args(host) == args
    assert url_host(host) == url
