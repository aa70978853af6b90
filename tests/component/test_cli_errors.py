"""Every error the CLI prints starts with `error:` (issue 55): representative failing invocations of each
command, run as a user runs them (22 subprocesses, 8 at a time: about 20 s of CPU, 10-25 s on 2 cores)."""

from __future__ import annotations

import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import CLI, EXAMPLES, ROOT

pytestmark = pytest.mark.cli

# lines a failing command may print beside its errors (stderr also carries these)
NOT_ERRORS = ("warning: ", "note: ")

INVALID_PIPELINE = """\
apiVersion: serving.tritonpipeline.io/v1alpha1
kind: TritonPipeline
metadata: {name: Bad_Name}
spec:
  modelRepository: {uri: ../nowhere}
  models:
    - {name: a, backend: python, inputs: [{name: X, dataType: FP99, dims: [4]}], outputs: []}
  pipelines: [{name: p, steps: [{model: missing}]}]
"""
S3_PIPELINE = (EXAMPLES / "fanout.yaml").read_text().replace("../model_repository", "s3://bucket/models")
PLACEHOLDER_CONFIG = 'name: "m"\nbackend: "python"\nmax_batch_size: ${triton_max_batch_size}\n'


def _invocations(tmp: Path, busy_port: int) -> dict[str, tuple[list[str], str | None]]:
    """name -> (arguments, standard input): one or more failing invocations of every command."""
    fanout = str(EXAMPLES / "fanout.yaml")
    (tmp / "invalid.yaml").write_text(INVALID_PIPELINE)
    (tmp / "s3.yaml").write_text(S3_PIPELINE)
    (tmp / "broken.yaml").write_text("apiVersion: [unclosed\n")
    (tmp / "full").mkdir()
    (tmp / "full" / "notes.txt").write_text("mine")
    (tmp / "repo" / "m").mkdir(parents=True)
    (tmp / "repo" / "m" / "config.pbtxt").write_text(PLACEHOLDER_CONFIG)
    return {
        "no command": ([], None),
        "unknown command": (["nope"], None),
        "unknown flag": (["validate", fanout, "--frobnicate"], None),
        "validate: no such file": (["validate", str(tmp / "nope.yaml")], None),
        "validate: not a pipeline (values.yaml)": (
            ["validate", str(ROOT / "charts" / "triton-pipeline" / "values.yaml")],
            None,
        ),
        "validate: several problems": (["validate", str(tmp / "invalid.yaml")], None),
        "validate: YAML syntax": (["validate", str(tmp / "broken.yaml")], None),
        "validate: stdin twice": (["validate", "-", "-"], ""),
        "validate: --models missing": (["validate", fanout, "--models", str(tmp / "nope")], None),
        "render: no -o": (["render", fanout], None),
        "render: non-empty output": (["render", fanout, "-o", str(tmp / "full")], None),
        "graph: png without -o": (["graph", fanout, "--format", "png"], None),
        "graph: unwritable output": (["graph", fanout, "-o", str(tmp / "no" / "dir" / "g.mmd")], None),
        "serve: bad port": (["serve", fanout, "--http-port", "0"], None),
        "serve: same port twice": (["serve", fanout, "--http-port", "9000", "--grpc-port", "9000"], None),
        "serve: port in use": (
            ["serve", fanout, "--cpu", "--metrics-port", str(busy_port), "--router", "python"],
            None,
        ),
        "serve: remote model files": (["serve", str(tmp / "s3.yaml"), "--cpu"], None),
        "manifests: local model files": (["manifests", fanout], None),
        "import: no such directory": (["import", str(tmp / "nope")], None),
        "import: config does not parse": (["import", str(tmp / "repo")], None),
        "run: bad namespace": (["run", "-n", "Bad_Name"], None),
        "assemble: no such directory": (
            ["assemble", "--generated", str(tmp / "nope"), "--source", str(tmp), "--out", str(tmp / "o")],
            None,
        ),
    }


def test_every_error_line_starts_with_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cases = _invocations(tmp_path, busy.getsockname()[1])

        def run(case: tuple[list[str], str | None]) -> subprocess.CompletedProcess[str]:
            args, stdin = case
            return subprocess.run(
                [str(CLI), *args], input=stdin, capture_output=True, text=True, timeout=120, cwd=tmp_path
            )

        with ThreadPoolExecutor(8) as pool:
            results = dict(zip(cases, pool.map(run, cases.values()), strict=True))
    wrong = []
    for name, done in results.items():
        lines = done.stderr.splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        others = [line for line in lines if not line.startswith(("error: ", *NOT_ERRORS))]
        if done.returncode == 0 or not errors or others:
            wrong.append(f"{name} (exit {done.returncode}):\n{done.stderr}")
    assert not wrong, "\n".join(wrong)
    # a usage error is one line naming the command's --help, not argparse's usage block
    assert results["serve: bad port"].stderr.splitlines() == [
        "error: argument --http-port: expected a port number 1-65535, got 0 (`tritonpipeline serve --help` "
        "shows the usage)"
    ]
    assert len(results["validate: several problems"].stderr.splitlines()) > 1  # one line a problem
