"""tritonpipeline.client resends a stateless request once when the server closed its pooled connection
(what a client sees when a pod leaves during a rollout), and never a request of a sequence (the rule is a
pure function: a restarted server cannot tell a resent sequence request from a lost one).

Real tritonserver: a first server answers (the client keeps the connection), is stopped, and a second one
starts on the same port; the client's next request goes out on the connection the first server closed.
Here the tests on real components; the pure ones are in tests/unit/test_client_resend.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from helpers import ROOT
from tritonpipeline.client import TritonClient


def _diamond() -> dict[str, Any]:
    """examples/diamond.yaml with its models from the repository."""
    doc = yaml.safe_load((ROOT / "examples" / "diamond.yaml").read_text())
    doc["spec"]["modelRepository"]["uri"] = str(ROOT / "model_repository")
    return dict(doc)


class Servers:
    """tritonserver on one HTTP port, restarted by `replace()`."""

    def __init__(self, tmp_path: Path) -> None:
        from tritonpipeline.compiler import compile_pipeline
        from tritonpipeline.local.repository import write_repository
        from tritonpipeline.spec import parse_pipeline

        tp = parse_pipeline(_diamond())
        self.repo = write_repository(
            compile_pipeline(tp, cpu_only=True), tmp_path / "repo", ROOT / "model_repository"
        )
        self.tmp_path = tmp_path
        self.server: Any = None
        self.port = 0
        self.started = 0

    def replace(self) -> None:
        from tritonpipeline.local.tritonserver import LocalTriton

        if self.server is not None:
            self.server.stop(timeout=30)
        log = self.tmp_path / f"triton{self.started}.log"
        self.server = LocalTriton(self.repo, http_port=self.port, log_file=log, admin_key=None)
        self.server.start()
        self.server.wait_ready(timeout=120)
        self.port, self.started = self.server.http_port, self.started + 1

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=30)


@pytest.fixture
def servers(tmp_path: Path) -> Any:
    s = Servers(tmp_path)
    s.replace()
    yield s
    s.stop()


def _image(client: Any) -> list[Any]:
    return [client.input("IMAGE", np.array([[1, 2, 3, 4]], dtype=np.float32))]


DIAMOND = np.array([[-17.0, -11.0, -5.0, 1.0]], dtype=np.float32)  # (3(2x+1)-2) - sum(2x+1), x = 1..4


@pytest.mark.tritonserver
def test_stateless_request_is_resent_after_the_server_closed_the_connection(servers: Servers) -> None:
    with TritonClient(f"127.0.0.1:{servers.port}", protocol="http") as client:
        np.testing.assert_allclose(client.infer("diamond", _image(client)).as_numpy("RESULT"), DIAMOND)
        servers.replace()  # the pooled connection is closed by the stopped server
        np.testing.assert_allclose(client.infer("diamond", _image(client)).as_numpy("RESULT"), DIAMOND)
