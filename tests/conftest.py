"""Shared fixtures: a real tritonserver serving a compiled pipeline (fresh per test, or shared by a
module), and a real kube-apiserver + etcd. Helpers shared by test modules live in helpers.py."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import compile_to_serve, native_router_or_skip
from node_cluster import chart_operator, cluster  # noqa: F401  (the `node` tests' fixtures)
from support.cli import write_invalid_cr
from support.dashboard import shipped_board
from support.importing import write_echo_repo
from support.tiers import FIXTURE_MARKERS

# tools/ holds scripts, not a package: its modules (generate.py, pictures.py, ...) are imported by name
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

pytest_plugins = ["phases"]  # time per test group (tests/phases.py)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
    if report.failed and "shared_pipeline" in getattr(item, "fixturenames", ()):
        for server in _SHARED_SERVERS.get(_module_id(item), {}).values():
            report.sections.append((f"tritonserver log ({server.log_file})", server.log_tail(200)))


def _module_id(item: pytest.Item) -> str:
    module = item.getparent(pytest.Module)
    return module.nodeid if module is not None else ""


@pytest.fixture(scope="session")
def native_router_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What the operator image sets for its init container: the variable naming its native router library
    (here the one built on this machine)."""
    from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
    from tritonpipeline.local.native_router import INSTALLED_ENV

    path = tmp_path_factory.mktemp("native-router") / NATIVE_ROUTER_LIBRARY
    path.write_bytes(native_router_or_skip())
    return {INSTALLED_ENV: str(path)}


def _start_pipeline(doc: dict[str, Any], workdir: Path, index: int, host: str = "127.0.0.1") -> Any:
    """A ready LocalTriton serving the compiled doc (CPU) from workdir/repo<index>; its routers on the
    native router when the doc's spec.server.router says `native`, else on the Python router."""
    from tritonpipeline.local.repository import check_model_dirs, write_repository
    from tritonpipeline.local.tritonserver import LocalTriton
    from tritonpipeline.spec import parse_pipeline

    tp = parse_pipeline(doc)
    artifacts = compile_to_serve(doc)
    root = Path(tp.spec.model_repository.uri)
    assert not check_model_dirs(tp, root)
    repo = write_repository(artifacts, workdir / f"repo{index}", root)
    log = workdir / f"triton{index}.log"
    server = LocalTriton(repo, host=host, log_file=log, extra_args=["--exit-timeout-secs=5"])
    try:
        server.start()
        server.wait_ready(timeout=120)
    except BaseException:
        server.stop(timeout=15)
        raise
    return server


@pytest.fixture
def serve_pipeline(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """serve_pipeline(doc) -> a ready LocalTriton of its own serving the compiled doc (CPU), for tests that
    change the server's state or need a fresh one. The server log is printed when the test fails."""
    servers: list[Any] = []

    def start(doc: dict[str, Any], host: str = "127.0.0.1") -> Any:
        servers.append(_start_pipeline(doc, tmp_path, len(servers), host))
        return servers[-1]

    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for server in servers:
        if failed:
            print(f"\n===== tritonserver log ({server.log_file}) =====\n{server.log_tail(200)}")
        server.stop(timeout=15)


_SHARED_SERVERS: dict[str, dict[str, Any]] = {}  # module node id -> {doc as JSON: its LocalTriton}


@pytest.fixture(scope="module")
def shared_pipeline(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Any]]:
    """shared_pipeline(doc) -> a ready LocalTriton serving the compiled doc (CPU), shared by consecutive
    tests of a module that serve an equal doc and only query it; a different doc replaces the server (one
    at a time). A failed test's report carries the server's log."""
    servers = _SHARED_SERVERS.setdefault(request.node.nodeid, {})
    workdir = tmp_path_factory.mktemp("shared-triton")
    started = 0

    def serve(doc: dict[str, Any]) -> Any:
        nonlocal started
        key = json.dumps(doc, sort_keys=True)
        if key not in servers:
            _stop_all(servers)
            servers[key] = _start_pipeline(doc, workdir, started)
            started += 1
        return servers[key]

    try:
        yield serve
    finally:
        _stop_all(_SHARED_SERVERS.pop(request.node.nodeid))


def _stop_all(servers: dict[str, Any]) -> None:
    while servers:
        servers.popitem()[1].stop(timeout=15)


@pytest.fixture(scope="session")
def helm_binary(request: pytest.FixtureRequest) -> Path:
    """helm from `go install helm.sh/helm/v3/cmd/helm@<pinned>` (built on first use, cached by version)."""
    from harness.gotools import ToolError, ToolUnavailable, ensure_tool

    try:
        with _built(request):
            return ensure_tool("helm", output=sys.stderr)
    except ToolUnavailable as err:
        pytest.skip(f"helm unavailable: {err}")
    except ToolError as err:
        pytest.fail(f"building helm failed: {err}", pytrace=False)


@pytest.fixture
def nginx_workdir(tmp_path: Path) -> Path:
    """A working directory for a real nginx (harness/nginx.py); skips with the reason without one."""
    from harness.nginx import missing_nginx

    reason = missing_nginx()
    if reason:
        pytest.skip(reason)
    return tmp_path / "nginx"


@pytest.fixture
def prometheus_dir(tmp_path: Path) -> Path:
    """A working directory for a real Prometheus (harness/prometheus.py); skips with the reason without
    one."""
    from harness.prometheus import missing_prometheus

    reason = missing_prometheus()
    if reason:
        pytest.skip(reason)
    return tmp_path / "prometheus"


# --- real Kubernetes control plane (etcd + kube-apiserver built from Go modules; harness/controlplane.py) ---


def _check_component_markers(items: list[pytest.Item]) -> None:
    """A test starting a component without its marker is an error (markers skip and group the tests)."""
    missing = [
        f"{item.nodeid}: uses {fixture}, needs @pytest.mark.{marker}"
        for item in items
        for fixture, marker in FIXTURE_MARKERS.items()
        if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None
    ]
    if missing:
        message = "tests without the marker of the component they start:"
        raise pytest.UsageError("\n".join([message, *missing]))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every selected test carries the marker of each real component its fixtures start (last of the
    collection hooks, so it sees the tests `-m`/`-k` selected). Nothing is built here: a component is built
    by the fixture that first needs it (`_built`), so `--collect-only` builds nothing."""
    _check_component_markers(items)


_RUNNING: dict[str, pytest.Item] = {}  # "item": the test being set up, run or torn down


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> None:
    _RUNNING["item"] = item


@contextlib.contextmanager
def _built(request: pytest.FixtureRequest) -> Iterator[None]:
    """Around a build of a component (several minutes the first time, e.g. kube-apiserver from Go modules):
    its progress goes to the terminal, uncaptured, and the build counts against no per-test timeout (the
    test's timer stops for the build and starts again, whole, after it)."""
    config = request.config
    item = _RUNNING.get("item")
    timed = item is not None and config.pluginmanager.hasplugin("timeout")
    if timed:
        config.hook.pytest_timeout_cancel_timer(item=item)
    capture = config.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            yield
    finally:
        if timed:
            from pytest_timeout import _get_item_settings  # pinned in pyproject.toml

            settings = _get_item_settings(item)
            if settings.timeout and not settings.func_only:
                config.hook.pytest_timeout_set_timer(item=item, settings=settings)


_CONTROL_PLANE_PROBLEM: dict[str | None, tuple[str, str]] = {}  # release -> ("skip"|"error", why)


def _control_plane_binaries(request: pytest.FixtureRequest, release: str | None) -> Any:
    """The cached etcd/kube-apiserver (of `release`), built first when missing: the first fixture that needs
    them builds them (etcd and the suite's kube-apiserver; with a release, every release at once). A build
    that cannot run (no Go, no openssl) skips with the reason; one that failed fails every test needing it,
    without building again."""
    from harness.controlplane_binaries import ControlPlaneError, ControlPlaneUnavailable, ensure_binaries

    if release not in _CONTROL_PLANE_PROBLEM:
        try:
            with _built(request):
                return ensure_binaries(output=sys.stderr, release=release)
        except ControlPlaneUnavailable as err:
            _CONTROL_PLANE_PROBLEM[release] = ("skip", str(err))
        except ControlPlaneError as err:
            _CONTROL_PLANE_PROBLEM[release] = ("error", str(err))
    kind, why = _CONTROL_PLANE_PROBLEM[release]
    if kind == "skip":
        pytest.skip(f"no control plane: {why}")
    pytest.fail(f"building the control plane failed: {why}", pytrace=False)


class _ControlPlaneLogsOnFailure:
    """Attach the etcd and kube-apiserver log tails to the report of a failed test that used them."""

    def __init__(self, cp: Any, fixture: str) -> None:
        self.cp = cp
        self.fixture = fixture

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if report.failed and self.fixture in getattr(item, "fixturenames", ()):
            report.sections.append(("control plane logs", self.cp.log_tails(40)))


def _control_plane(request: pytest.FixtureRequest, workdir: Path, release: str | None) -> Iterator[Any]:
    from harness.controlplane import ControlPlane

    cp = ControlPlane(workdir, _control_plane_binaries(request, release))
    cp.start()
    fixture = "release_plane" if release else "control_plane"
    plugin = _ControlPlaneLogsOnFailure(cp, fixture)
    request.config.pluginmanager.register(plugin, f"tritonpipeline-logs-{fixture}")
    try:
        yield cp
    finally:
        request.config.pluginmanager.unregister(plugin)
        cp.stop()


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real kube-apiserver + etcd on loopback (RBAC on, admin client cert). `.kubeconfig`, `.url`,
    `.api_client(user=..., groups=...)`. Skips with the reason when Go/openssl are missing."""
    yield from _control_plane(request, tmp_path_factory.mktemp("controlplane"), None)


@pytest.fixture(scope="module", params=["floor", "newest"])
def release_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same, with the kube-apiserver of another release (harness/controlplane_binaries.py RELEASES): the
    oldest the chart supports, then the newest."""
    release = str(request.param)
    yield from _control_plane(request, tmp_path_factory.mktemp(f"{release}plane"), release)


@pytest.fixture(scope="session")
def kube(control_plane: Any) -> Any:
    """An admin Kube client on the control plane, with the generated TritonPipeline CRD established."""
    from harness.kubeapi import install_generated_crd
    from tritonpipeline.kube.api_client import Kube

    client = Kube(control_plane.api_client(), "test-admin")
    install_generated_crd(client)
    return client


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace on the control plane for one test, deleted after it."""
    import uuid

    ns = f"t-{uuid.uuid4().hex[:8]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield ns
    kube.delete("v1", "Namespace", None, ns)


@pytest.fixture
def run_operator(
    control_plane: Any, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Any]]:
    """start(env, endpoints) -> `tritonpipeline run -n NAMESPACE` (harness LocalOperator; `endpoints`:
    with /metrics and /readyz, returned once ready), each with a log of its own; stopped afterwards,
    the last one's log printed when the test failed."""
    from harness.operator_process import LocalOperator, PortTaken

    started: list[LocalOperator] = []

    def start(env: dict[str, str] | None = None, endpoints: bool = False) -> LocalOperator:
        log = tmp_path / ("operator.log" if not started else f"operator-{len(started)}.log")
        tries = 3  # free ports, picked again where one was taken before the operator bound it
        while True:
            op = LocalOperator(control_plane.kubeconfig, namespace, log, env=env, endpoints=endpoints).start()
            started.append(op)
            if not endpoints:
                return op
            try:
                op.wait_ready(60)
                return op
            except PortTaken:
                tries -= 1
                if not tries:
                    raise

    yield start
    for op in started:
        op.stop()
    rep = getattr(request.node, "rep_call", None)
    if started and rep is not None and rep.failed:
        print(f"\n===== operator log =====\n{started[-1].text()[-6000:]}")


# files both halves of a split test module use (tests/unit and tests/component), defined once here


@pytest.fixture
def invalid_cr(tmp_path: Path) -> Path:
    """A CR file with a spec error (support/cli.py)."""
    return write_invalid_cr(tmp_path)


@pytest.fixture
def echo_repo(tmp_path: Path) -> Path:
    """A model repository of one echo model (support/importing.py)."""
    return write_echo_repo(tmp_path)


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    """The Grafana dashboard the chart ships (support/dashboard.py)."""
    return shipped_board()
