"""Shared fixtures: example specs, and a real tritonserver serving a compiled pipeline."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MODELS = ROOT / "model_repository"


def example(name: str) -> dict[str, Any]:
    """A fresh, mutable copy of examples/<name>.yaml with an absolute model repository path."""
    doc = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    doc["spec"]["modelRepository"]["uri"] = str(MODELS)
    return copy.deepcopy(doc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def serve_pipeline(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """serve_pipeline(doc) -> a ready LocalTriton serving the compiled doc (CPU). The server log is
    printed when the test fails."""
    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.repository import check_model_dirs, write_repository
    from tritonpipeline.server import LocalTriton
    from tritonpipeline.spec import parse_pipeline

    servers: list[LocalTriton] = []

    def start(doc: dict[str, Any]) -> LocalTriton:
        tp = parse_pipeline(doc)
        artifacts = compile_pipeline(tp, cpu_only=True)
        root = Path(tp.spec.model_repository.uri)
        assert not check_model_dirs(tp, root)
        repo = write_repository(artifacts, tmp_path / f"repo{len(servers)}", root)
        server = LocalTriton(
            repo, log_file=tmp_path / f"triton{len(servers)}.log", extra_args=["--exit-timeout-secs=5"]
        )
        servers.append(server)
        server.start()
        server.wait_ready(timeout=120)
        return server

    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for server in servers:
        if failed:
            print(f"\n===== tritonserver log ({server.log_file}) =====\n{server.log_tail(200)}")
        server.stop(timeout=15)
