"""Every TritonPipeline YAML the docs show is one the spec accepts and the compiler compiles: a whole CR as
it is, a `spec:` or `modelRepository:` fragment laid over examples/fanout.yaml (each `---` document apart).
A snippet that drifts from the spec (a renamed field, a removed value) fails here, not in a user's
`kubectl apply`. The request of docs/getting-started/local.md (serve, curl, tritonclient) is run as the
page writes it, against a real `serve`.
Here the tests on real components; the pure ones are in tests/unit/test_docs_snippets.py."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, curl_answers_as_shown, on_ports, served
from support.docs_snippets import REQUEST_PAGE, REQUEST_SECTION, fenced_blocks


@pytest.mark.tritonserver
@pytest.mark.cli
def test_the_request_section_runs_as_written(tmp_path: Path) -> None:
    """Issue 55: no page showed a request to a locally served pipeline. local.md's section serves an
    example (its first block), asks it with curl (the answer: the json block) and with tritonclient over
    HTTP and gRPC (each printing the text block after it). The commands run as written, from the
    repository's root, but for the ports: free ones, in the serve command and for localhost:8000/8001.
    About 10 s (the example's four models load)."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (make system-deps installs it)")
    blocks = fenced_blocks(REQUEST_PAGE, REQUEST_SECTION)
    (serve_line,) = blocks[0][1].strip().splitlines()
    words = shlex.split(serve_line)
    assert words[:2] == [".venv/bin/tritonpipeline", "serve"], serve_line
    with served(*words[2:]) as (http, grpc):
        curl_answers_as_shown(blocks[1][1], blocks[2][1], http, grpc)
        for (language, code), (_, printed) in zip(blocks[3::2], blocks[4::2], strict=True):
            assert language == "python"
            run = subprocess.run(
                [sys.executable, "-c", on_ports(code, http, grpc)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert (run.returncode, run.stdout) == (0, printed), run.stderr
