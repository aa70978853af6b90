"""The cluster tutorial (docs/getting-started/cluster.md): the page's requests get the answers it shows from
the example served locally on a real tritonserver. The rest of the page's checks:
tests/unit/test_tutorial.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import EXAMPLES, MODELS, ROOT, curl_answers_as_shown, on_ports, served
from support.tutorial import PAGE

# ------------------------------------------------------------------------- the requests, against serve


@pytest.mark.tritonserver
@pytest.mark.cli
def test_the_page_s_requests_get_the_answers_it_shows(tmp_path: Path) -> None:
    """The page's curl and Python blocks, as written but for the ports, against the cluster example served
    locally (`serve --models model_repository`: the claim's content): the curl answer is the json block,
    the Python prints the text block after it. About 10 s (the example's four models load)."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (make system-deps installs it)")
    text = PAGE.read_text()
    section = text[text.index("\n## Send requests\n") : text.index("\n## Clean up\n")]
    shown = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    languages = [language for language, _ in shown]
    assert languages == ["bash", "bash", "json", "python", "text", "bash"], languages
    with served(str(EXAMPLES / "cluster" / "fanout.yaml"), "--models", str(MODELS)) as (http, grpc):
        curl_answers_as_shown(shown[1][1], shown[2][1], http, grpc)
        (program := tmp_path / "request.py").write_text(on_ports(shown[3][1], http, grpc))
        run = subprocess.run(
            [sys.executable, str(program)], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert (run.returncode, run.stdout) == (0, shown[4][1]), run.stderr
