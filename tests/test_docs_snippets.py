"""Every TritonPipeline YAML the docs show is one the spec accepts and the compiler compiles: a whole CR as
it is, a `spec:` or `modelRepository:` fragment laid over examples/fanout.yaml (each `---` document apart).
A snippet that drifts from the spec (a renamed field, a removed value) fails here, not in a user's
`kubectl apply`. The request of docs/getting-started/local.md (serve, curl, tritonclient) is run as the
page writes it, against a real `serve`."""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import DOCS, ROOT, curl_answers_as_shown, example, on_ports, served
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.spec import parse_pipeline

YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)
# the top-level keys of a snippet that is part of a TritonPipeline, and where it goes in one
FRAGMENT_ROOTS = {"apiVersion": (), "spec": ("spec",), "modelRepository": ("spec", "modelRepository")}


def snippets() -> Iterator[tuple[str, dict[str, Any]]]:
    for page in sorted(DOCS.rglob("*.md")):
        for n, block in enumerate(YAML_BLOCK.findall(page.read_text())):
            for k, doc in enumerate(yaml.safe_load_all(block)):
                if isinstance(doc, dict) and next(iter(doc), None) in FRAGMENT_ROOTS:
                    yield f"{page.relative_to(DOCS)}[{n}.{k}]", doc


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if nested else value
    return out


def as_pipeline(doc: dict[str, Any]) -> dict[str, Any]:
    root = next(iter(doc))
    if root == "apiVersion":
        return doc
    patch: dict[str, Any] = doc[root]
    for key in reversed(FRAGMENT_ROOTS[root]):
        patch = {key: patch}
    return merged(example("fanout"), patch)


SNIPPETS = list(snippets())


def test_the_docs_show_pipelines() -> None:
    # the pipelines page's CR, the model sources, autoscaling and streaming ASR fragments at least
    assert len(SNIPPETS) >= 5, [name for name, _ in SNIPPETS]


@pytest.mark.parametrize(("name", "doc"), SNIPPETS, ids=[name for name, _ in SNIPPETS])
def test_every_pipeline_snippet_is_valid(name: str, doc: dict[str, Any]) -> None:
    compile_pipeline(parse_pipeline(as_pipeline(doc)))


def test_a_snippet_with_a_wrong_field_is_caught() -> None:
    from tritonpipeline.errors import SpecError

    with pytest.raises(SpecError, match="streamDrainSecond"):
        compile_pipeline(parse_pipeline(as_pipeline({"spec": {"routing": {"streamDrainSecond": 600}}})))


# -- docs/getting-started/local.md's "Send a request", run as written against a real `serve`

FENCED = re.compile(r"```(\w+)\n(.*?)```", re.S)
REQUEST_PAGE = DOCS / "getting-started" / "local.md"
REQUEST_SECTION = "## Send a request"


def fenced_blocks(page: Path, section: str) -> list[tuple[str, str]]:
    """(language, text) of each fenced block of `page` under the heading `section`, in order."""
    text = page.read_text()
    start = text.index(f"\n{section}\n")
    end = text.find("\n## ", start + 1)
    return FENCED.findall(text[start : end if end != -1 else len(text)])


def test_the_request_section_shows_serve_curl_and_python() -> None:
    languages = [language for language, _ in fenced_blocks(REQUEST_PAGE, REQUEST_SECTION)]
    assert languages == ["sh", "sh", "json", "python", "text", "python", "text"], languages


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
