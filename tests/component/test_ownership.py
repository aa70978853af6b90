"""Whose an object is, and what a pipeline may write (render/ownership.py): pure rules, no server. The same
rules on a real kube-apiserver are in tests/component/test_operator_ownership.py; `tritonpipeline validate` of
colliding pipelines is at the end.
Here the tests on real components; the pure ones are in tests/unit/test_ownership.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers import CLI, example


@pytest.mark.cli
def test_validate_refuses_pipelines_whose_objects_collide(tmp_path: Path) -> None:
    """Two pipelines of one namespace validated together, one making the other's Service: both named."""
    docs = []
    for name in ("b", "b-headless", "c"):
        doc = example("fanout")
        doc["metadata"] = {"name": name, "namespace": "ml"}
        docs.append(doc)
    other = example("fanout")
    other["metadata"] = {"name": "b-headless", "namespace": "elsewhere"}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all(docs[:1]))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump_all([*docs[1:], other]))
    run = subprocess.run(
        [str(CLI), "validate", "--output", "json", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    results = {Path(r["file"]).name: r for r in json.loads(run.stdout)}
    assert not results["a.yaml"]["valid"] and not results["b.yaml"]["valid"]
    messages = [e["message"] for r in results.values() for e in r["errors"]]
    assert any("pipeline 'b-headless' (in this namespace) makes Service 'b-headless'" in m for m in messages)
    assert any("pipeline 'b' (in this namespace) makes Service 'b-headless'" in m for m in messages)
    assert len(messages) == 2, messages  # not c, not the pipeline of the other namespace
    text = subprocess.run(
        [str(CLI), "validate", str(tmp_path / "b.yaml")], capture_output=True, text=True, check=False
    )
    assert text.returncode == 0, text.stderr  # alone, nothing collides
