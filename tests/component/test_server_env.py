"""The local tritonserver's environment: a tree named by TRITONPIPELINE_SERVER_HOME, and the numpy warning.
Here the tests on real components; the pure ones are in tests/unit/test_server_env.py."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import example
from tritonpipeline.local.tritonserver import HOME_ENV, LocalTriton, server_home


@pytest.mark.tritonserver
def test_a_tree_laid_out_like_nvidias_image_serves(tmp_path: Path, monkeypatch) -> None:
    """A copy of the wheel's tree in NVIDIA's layout (bin/, lib/, backends/, no link back into the
    wheel) named by TRITONPIPELINE_SERVER_HOME serves a compiled pipeline."""
    from tritonpipeline.client import TritonClient
    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.local.repository import write_repository
    from tritonpipeline.spec import parse_pipeline

    wheel_tree = server_home()
    tree = tmp_path / "tritonserver"
    for part in ("bin", "lib", "backends"):
        shutil.copytree(wheel_tree / part, tree / part, symlinks=False)
    monkeypatch.setenv(HOME_ENV, str(tree))
    doc = example("fanout")
    tp = parse_pipeline(doc)
    repo = write_repository(
        compile_pipeline(tp, cpu_only=True), tmp_path / "repo", Path(tp.spec.model_repository.uri)
    )
    server = LocalTriton(repo, log_file=tmp_path / "triton.log")
    assert server.home == tree and server.command()[0] == str(tree / "bin" / "tritonserver")
    with server, TritonClient(server.grpc_url, protocol="grpc") as client:
        x = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
        result = client.infer("vision", [client.input("IMAGE", x)])
        np.testing.assert_allclose(result.as_numpy("SCORE_B"), 3 * (2 * x + 1) - 2)


def _group_members(pgid: int) -> list[int]:
    """The live PIDs in process group `pgid` (from /proc; zombies left out)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:  # state, then ppid, then pgrp
                members.append(int(entry.name))
    return members


@pytest.mark.tritonserver
def test_a_server_that_died_leaves_no_stub_behind(tmp_path: Path) -> None:
    """tritonserver killed (as a crash ends it) while its Python models' stub processes hang (stopped
    here, so they cannot notice and exit): stop() ends what is left of its process group."""
    import os
    import signal

    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.local.repository import write_repository
    from tritonpipeline.spec import parse_pipeline

    tp = parse_pipeline(example("fanout"))
    repo = write_repository(
        compile_pipeline(tp, cpu_only=True), tmp_path / "repo", Path(tp.spec.model_repository.uri)
    )
    server = LocalTriton(repo, log_file=tmp_path / "triton.log")
    stubs: list[int] = []
    try:
        with server:
            assert server.process is not None
            pgid = server.process.pid
            stubs = [pid for pid in _group_members(pgid) if pid != pgid]
            assert stubs, "no stub process: the fanout example's models are Python models"
            for pid in stubs:
                os.kill(pid, signal.SIGSTOP)
            os.kill(pgid, signal.SIGKILL)  # the server alone, as a crash
            server.process.wait(30)
            time.sleep(1)
            assert set(stubs) <= set(_group_members(pgid)), "the stubs hang on"
        deadline = time.monotonic() + 10  # SIGKILL is delivered, not waited for
        while _group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _group_members(pgid) == []
    finally:
        for pid in stubs:  # what a failed run left, by PID
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
