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


# --- real Kubernetes control plane (etcd + kube-apiserver built from Go modules; see e2e/) -----------

import contextlib  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, str(ROOT / "e2e"))

_CONTROL_PLANE_PROBLEM: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build kube-apiserver/etcd before the first test that needs them (several minutes the first time),
    outside any per-test timeout. `make test` has normally built them already; then this is a no-op."""
    if not any("control_plane" in getattr(item, "fixturenames", ()) for item in items):
        return
    from controlplane import ControlPlaneError, ControlPlaneUnavailable, cached_binaries, ensure_binaries

    if cached_binaries() is not None:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        try:
            ensure_binaries(output=sys.stderr)
        except ControlPlaneUnavailable as err:
            _CONTROL_PLANE_PROBLEM["skip"] = str(err)
        except ControlPlaneError as err:
            _CONTROL_PLANE_PROBLEM["error"] = str(err)


class _ControlPlaneLogsOnFailure:
    """Attach the etcd and kube-apiserver log tails to the report of a failed test that used them."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if report.failed and "control_plane" in getattr(item, "fixturenames", ()):
            report.sections.append(("control plane logs", self.cp.log_tails(40)))


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real kube-apiserver + etcd on loopback (RBAC on, admin client cert). `.kubeconfig`, `.url`,
    `.api_client(user=..., groups=...)`. Skips with the reason when Go/openssl are missing."""
    from controlplane import ControlPlane, ControlPlaneUnavailable, ensure_binaries

    if "skip" in _CONTROL_PLANE_PROBLEM:
        pytest.skip(f"no control plane: {_CONTROL_PLANE_PROBLEM['skip']}")
    if "error" in _CONTROL_PLANE_PROBLEM:
        pytest.fail(f"building the control plane failed: {_CONTROL_PLANE_PROBLEM['error']}", pytrace=False)
    try:
        binaries = ensure_binaries(output=sys.stderr)
    except ControlPlaneUnavailable as err:
        pytest.skip(f"no control plane: {err}")
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"), binaries)
    cp.start()
    plugin = _ControlPlaneLogsOnFailure(cp)
    request.config.pluginmanager.register(plugin, "tritonpipeline-control-plane-logs")
    try:
        yield cp
    finally:
        request.config.pluginmanager.unregister(plugin)
        cp.stop()


@pytest.fixture(scope="session")
def kube(control_plane: Any) -> Any:
    """An admin Kube client on the control plane, with the generated TritonPipeline CRD established."""
    from chart import install_generated_crd
    from tritonpipeline.kube.client import Kube

    client = Kube(control_plane.api_client(), "test-admin")
    install_generated_crd(client)
    return client
