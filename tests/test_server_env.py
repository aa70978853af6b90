"""The local tritonserver's environment: a tree named by TRITONPIPELINE_SERVER_HOME, and the numpy warning."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import example
from tritonpipeline.local.server import HOME_ENV, LocalTriton, TritonError, numpy_warning, server_home


def test_numpy_warning_only_for_numpy_2() -> None:
    assert numpy_warning(None) is None
    assert numpy_warning("1.26.4") is None
    message = numpy_warning("2.2.6")
    assert message is not None and "numpy 2.2.6" in message and "numpy<2" in message


def test_server_home_refuses_a_tree_without_tritonserver(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "backends").mkdir()
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    with pytest.raises(TritonError, match=r"not a tritonserver tree \(missing bin/tritonserver\)"):
        server_home()


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
