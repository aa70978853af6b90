"""Run the real `tritonserver` shipped in the nvidia-pytriton wheel (CPU is fine) on a repository."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from glob import escape as glob_escape
from importlib import metadata
from pathlib import Path

from ..errors import Problem
from ..spec import PLATFORM_BACKEND, Model
from ..triton import security
from ..triton.addresses import listen_args, url_host


class TritonError(RuntimeError):
    """tritonserver could not be found, started, or did not become ready."""


# tritonserver's log lines (model_lifecycle.cc) as a model starts and ends loading
LOADING_RE = re.compile(r'"loading: (.+?):\d+"')
LOADED_RE = re.compile(r"\"(?:successfully loaded|failed to load) '([^']+)'")
SHM_DIR = "/dev/shm"  # where the Python backend's shared-memory regions live (Linux)
PROGRESS_SECONDS = 5.0  # how often `serve` says how the model load goes


def loading_progress(log: str, seconds: float) -> str:
    """A line on a load under way from tritonserver's log: how long, how many of the models it started
    loading are done, and which it still waits for (the server answers nothing before all are)."""
    started = list(dict.fromkeys(LOADING_RE.findall(log)))
    done = set(LOADED_RE.findall(log))
    pending = [name for name in started if name not in done]
    if not started:
        return f"  ... {seconds:.0f}s: tritonserver is starting"
    waiting = f"; waiting for {', '.join(pending)}" if pending else ""
    return f"  ... {seconds:.0f}s: {len(started) - len(pending)} of {len(started)} models done{waiting}"


class Interrupted(TritonError):
    """The wait for readiness was asked to stop (Ctrl-C or SIGTERM while the models load)."""


def _pytriton_dist() -> Path:
    try:
        import pytriton
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise TritonError(
            "nvidia-pytriton is not installed; run `make venv` or pip install nvidia-pytriton"
        ) from exc
    return Path(pytriton.__file__).resolve().parent


HOME_ENV = "TRITONPIPELINE_SERVER_HOME"
_LAYOUT = "l2"  # bump when the cached tree's layout changes (l2: lib/ beside bin/)


def cache_root() -> Path:
    """Where built and unpacked tools are cached, outside any repository (the tritonserver tree, the
    native router, and the harness's and build scripts' tools): $TRITONPIPELINE_CACHE, else
    ${XDG_CACHE_HOME:-~/.cache}/tritonpipeline."""
    root = os.environ.get("TRITONPIPELINE_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tritonpipeline"


def server_home() -> Path:
    """A ready-to-run tritonserver tree: `bin/tritonserver`, `backends/` (with the Python backend's stub
    for this interpreter) and optionally `lib/`, laid out like NVIDIA's image (`/opt/tritonserver`).

    $TRITONPIPELINE_SERVER_HOME names such a tree (NVIDIA's image, or one packed by `make gpu-pack`);
    otherwise one is prepared once per pytriton and Python version under the user cache directory
    from the nvidia-pytriton wheel."""
    override = os.environ.get(HOME_ENV)
    if override:
        home = Path(override)
        missing = [p for p in ("bin/tritonserver", "backends") if not (home / p).exists()]
        if missing:
            raise TritonError(
                f"{HOME_ENV}={override}: not a tritonserver tree (missing {', '.join(missing)})"
            )
        return home
    dist = _pytriton_dist() / "tritonserver"
    version = metadata.version("nvidia-pytriton")
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    cache = cache_root()
    # keyed by the wheel's location too: the tree links into it, and another venv has another path
    where = hashlib.sha256(str(dist).encode()).hexdigest()[:8]
    home = cache / f"tritonserver-{version}-py{py}-{where}-{_LAYOUT}"
    if (home / ".ready").exists() and (home / "bin" / "tritonserver").exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    stub = dist / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonError(f"nvidia-pytriton {version} ships no Python backend stub for Python {py}")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
    (tmp / "backends" / "python").mkdir(parents=True)
    os.symlink(dist / "bin", tmp / "bin")
    os.symlink(dist.parent.parent / "nvidia_pytriton.libs", tmp / "lib")
    for entry in (dist / "backends" / "python").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, tmp / "backends" / "python" / entry.name)
    shutil.copy2(stub, tmp / "backends" / "python" / "triton_python_backend_stub")
    (tmp / ".ready").write_text(version)
    try:
        os.rename(tmp, home)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return home


MISSING_BACKEND = (
    "backend {backend!r} is not among those of the tritonserver that serve runs ({have} in {dir}), nor a "
    "libtriton_{backend}.so in the model's directory, where Triton also looks: serve the pipeline where "
    "Triton has that backend (a cluster whose image has it, or {env} naming such a tritonserver tree)"
)


def missing_backends(models: Sequence[Model], home: Path, model_root: Path) -> list[Problem]:
    """The declared models whose backend the tritonserver tree at `home` lacks: no `backends/<name>/`
    (a C++ backend's library or a Python-based backend's model.py), and no `libtriton_<name>.so` in the
    model's directory or a version directory of it, where Triton looks first."""
    backends = home / "backends"
    have = sorted(p.name for p in backends.iterdir() if p.is_dir()) if backends.is_dir() else []
    problems = []
    for i, model in enumerate(models):
        name = model.backend or PLATFORM_BACKEND.get(model.platform or "", "")
        lib = f"libtriton_{name}.so"
        where = model_root / model.name
        places = [where, *(p for p in where.iterdir() if p.is_dir())] if where.is_dir() else []
        if name in have or any((p / lib).is_file() for p in places):
            continue
        field = "backend" if model.backend else "platform"
        message = MISSING_BACKEND.format(
            backend=name, have=", ".join(have) or "none", dir=backends, env=HOME_ENV
        )
        problems.append(Problem(f"spec.models[{i}].{field}", message))
    return problems


def server_env(home: Path | None = None) -> dict[str, str]:
    """Environment for tritonserver: the tree's `lib/` (the wheel's bundled libraries) and this
    interpreter's libpython on the library path, and this interpreter's directory first on PATH so
    Python-backend models import this environment's packages."""
    home = home or server_home()
    env = dict(os.environ)
    libs = [str(home / "lib")] if (home / "lib").is_dir() else []
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        libs.append(libdir)
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def numpy_warning(version: str | None) -> str | None:
    """Why Python-backend models may answer with empty tensors under this numpy, or None.

    Seen with Triton 2.51 (nvidia-pytriton 0.7.0) on Python 3.12: a tensor built from a numpy 2 array
    (`pb_utils.Tensor(name, array)`) reaches the next step with no data ("input byte size mismatch ...
    got 0"), while numpy 1.26 works. Tensors passed through DLPack, as the routers do, are not affected."""
    if version is None or int(version.split(".", 1)[0]) < 2:
        return None
    return (
        f"numpy {version} is installed: Triton 2.51's Python-backend stub returns tensors made from numpy 2 "
        "arrays empty ('input byte size mismatch ... got 0'); models that build outputs with "
        "pb_utils.Tensor(name, numpy_array) need numpy<2 (DLPack outputs and the routers are not affected)"
    )


def installed_numpy() -> str | None:
    try:
        return metadata.version("numpy")
    except metadata.PackageNotFoundError:
        return None


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on loopback (all bound at once, so none is handed out twice)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_in_use(host: str, port: int) -> str | None:
    """Why tritonserver could not listen on host:port (something listens there already), else None. Bound
    with SO_REUSEADDR, as servers are, so a connection of a just-ended server lingering in TIME_WAIT does
    not count."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def free_port() -> int:
    return free_ports(1)[0]


PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal a process gets when its parent dies


def _die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn that makes the child get `sig` when the starting thread's process dies, even by
    SIGKILL (Linux prctl), so no tritonserver outlives `serve`. None where prctl is unavailable."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)

    return preexec


def end_process(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """End a process started in its own session (so it leads its own process group, of its PID): SIGTERM,
    then SIGKILL to the group after `timeout` seconds; then SIGKILL to what is left of the group (a
    process that died, of a crash or a kill, leaves its children running: tritonserver its backends'
    stubs). Its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError):  # none left
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


@dataclass
class LocalTriton:
    """One tritonserver process. Use as a context manager, or start()/wait_ready()/stop().
    With die_with_parent the server gets SIGTERM when the thread that started it exits (Linux)."""

    repository: Path
    http_port: int = 0  # 0: a free port, distinct from the other two
    grpc_port: int = 0
    metrics_port: int = 0
    host: str = "127.0.0.1"
    log_file: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    home: Path = field(default_factory=server_home)
    die_with_parent: bool = True
    # the administrative APIs (security.ADMIN_APIS) answer only requests carrying this key; None: open
    admin_key: str | None = field(default_factory=security.new_key, repr=False)
    # the Python backend's shared-memory regions are /dev/shm/<this>*: this process's pid and a random token
    shm_prefix: str = field(default_factory=lambda: f"tp{os.getpid()}_{secrets.token_hex(3)}_")

    def __post_init__(self) -> None:
        taken = {self.http_port, self.grpc_port, self.metrics_port} - {0}
        picked = iter(p for p in free_ports(6) if p not in taken)
        self.http_port = self.http_port or next(picked)
        self.grpc_port = self.grpc_port or next(picked)
        self.metrics_port = self.metrics_port or next(picked)

    @property
    def http_url(self) -> str:
        return f"{url_host(self.host)}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{url_host(self.host)}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{url_host(self.host)}:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        home = self.home
        return [
            str(home / "bin" / "tritonserver"),
            f"--model-repository={self.repository}",
            f"--backend-directory={home / 'backends'}",
            *listen_args(self.host),
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true",
            "--strict-readiness=true",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            *(security.restricted_args(self.admin_key) if self.admin_key else []),
            *self.extra_args,
        ]

    def admin_headers(self, protocol: str = "http") -> dict[str, str]:
        """Headers (HTTP) or metadata (gRPC) that open this server's administrative APIs."""
        return security.headers(self.admin_key, protocol) if self.admin_key else {}

    def start(self) -> LocalTriton:
        if self.log_file is None:
            self.log_file = Path(self.repository).parent / f"tritonserver-{self.http_port}.log"
        log = open(self.log_file, "wb")  # noqa: SIM115 - handed to the child process
        try:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_env(self.home),
                start_new_session=True,
                preexec_fn=_die_with_parent() if self.die_with_parent else None,
            )
        finally:
            log.close()
        return self

    def logs(self) -> str:
        if self.log_file and self.log_file.exists():
            return self.log_file.read_text(errors="replace")
        return ""

    def _get(
        self, path: str, method: str = "GET", body: bytes | None = None, admin: bool = False
    ) -> tuple[int, bytes]:
        headers = self.admin_headers() if admin else {}
        url = f"http://{self.http_url}{path}"
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=2) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_ready(
        self,
        timeout: float = 120.0,
        stop: Callable[[], bool] = lambda: False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """Block until /v2/health/ready answers 200 and the metrics endpoint answers too (tritonserver
        starts it a moment after the HTTP service); raise TritonError with the log tail otherwise (naming
        the models not yet ready), Interrupted as soon as `stop()` says so. Every PROGRESS_SECONDS
        `progress` gets a line on the load (`loading_progress`)."""
        started = time.monotonic()
        deadline, told = started + timeout, started
        while time.monotonic() < deadline:
            if progress is not None and time.monotonic() - told >= PROGRESS_SECONDS:
                told = time.monotonic()
                progress(loading_progress(self.logs(), told - started))
            if stop():
                raise Interrupted(f"interrupted while the models load{self._loading()}")
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise TritonError(
                    f"tritonserver exited (code {code}) before it was ready:\n{self.log_tail()}"
                )
            try:
                status, _ = self._get("/v2/health/ready")
                if status == 200:
                    with urllib.request.urlopen(self.metrics_url, timeout=5):
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        raise TritonError(f"tritonserver not ready after {timeout:g}s{self._loading()}:\n{self.log_tail()}")

    def _loading(self) -> str:
        """` (not ready: MODEL, ...)`: the models the log says started loading and did not finish (the
        server loads them before it answers on any endpoint)."""
        log = self.logs()
        started = dict.fromkeys(LOADING_RE.findall(log))
        done = set(LOADED_RE.findall(log))
        pending = [name for name in started if name not in done]
        return f" (not ready: {', '.join(pending)})" if pending else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.logs().splitlines()[-lines:])

    def models(self) -> list[dict[str, str]]:
        """The repository index: name, version, state (READY, UNAVAILABLE...) and reason."""
        status, body = self._get("/v2/repository/index", method="POST", body=b"{}", admin=True)
        if status != 200:
            raise TritonError(f"repository index failed with HTTP {status}: {body[:200]!r}")
        return json.loads(body)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (Triton drains and unloads), then SIGKILL after `timeout`; then what is left of the
        server's process group (a server that died, of a crash or a kill, leaves its backends' stub
        processes running); then the shared-memory regions its Python backend left (`remove_shm`)."""
        code = None if self.process is None else end_process(self.process, timeout)
        self.remove_shm()
        return code

    def remove_shm(self) -> list[Path]:
        """Remove this server's Python-backend regions from SHM_DIR: a server stopped while its models
        load (Ctrl-C, --timeout) leaves them behind. Only names with this server's own prefix."""
        removed = []
        for path in Path(SHM_DIR).glob(f"{glob_escape(self.shm_prefix)}*"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
        return removed

    def __enter__(self) -> LocalTriton:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
