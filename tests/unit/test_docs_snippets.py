"""Every TritonPipeline YAML the docs show is one the spec accepts and the compiler compiles: a whole CR as
it is, a `spec:` or `modelRepository:` fragment laid over examples/fanout.yaml (each `---` document apart).
A snippet that drifts from the spec (a renamed field, a removed value) fails here, not in a user's
`kubectl apply`. The request of docs/getting-started/local.md (serve, curl, tritonclient) is run as the
page writes it, against a real `serve`.
Here the pure tests; those on real components are in tests/component/test_docs_snippets.py."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from helpers import DOCS, example
from support.docs_snippets import REQUEST_PAGE, REQUEST_SECTION, fenced_blocks
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


def test_the_request_section_shows_serve_curl_and_python() -> None:
    languages = [language for language, _ in fenced_blocks(REQUEST_PAGE, REQUEST_SECTION)]
    assert languages == ["sh", "sh", "json", "python", "text", "python", "text"], languages
