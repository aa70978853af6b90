"""spec.server.args are read the way tritonserver reads them (getopt_long: `=` and space forms, unique
prefixes, ambiguous prefixes refused), so no form can override what the operator sets. The option
table is checked against the real binary's --help, and the parser against the binary's own verdicts;
`serve` passes the args to the local tritonserver.
Here the tests on real components; the pure ones are in tests/unit/test_server_args.py."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from helpers import CLI, ROOT
from support.server_args import doc_with
from tritonpipeline.local.tritonserver import LocalTriton, TritonError, free_ports, server_env, server_home
from tritonpipeline.triton import tritonserver_options as opts

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
