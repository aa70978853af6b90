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
import stat
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from glob import escape as glob_escape
from glob import glob
from importlib import metadata
from pathlib import Path

from ..errors import Problem, clip
from ..spec import PLATFORM_BACKEND, Model
from ..triton import security
from ..triton.addresses import listen_args, url_host


class TritonError(RuntimeError):
    """tritonserver could not be found, started, or did not become ready."""


class NotReady(TritonError):
    """tritonserver exited before it was ready, or was not ready in time. `headline`: that in one line;
    the message adds the log's tail (what a test's failure shows)."""

    def __init__(self, headline: str, tail: str, *, exited: bool) -> None:
        self.headline = headline
        self.exited = exited  # the server exited (else: still loading when the time was up)
        super().__init__(f"{headline}:\n{tail}")


# tritonserver's log lines (model_lifecycle.cc) as a model starts and ends loading
LOADING_RE = re.compile(r'"loading: (.+?):\d+"')
LOADED_RE = re.compile(r"\"(?:successfully loaded|failed to load) '([^']+)'")
SHM_DIR = "/dev/shm"  # where the Python backend's shared-memory regions live (Linux)
# the Python backend's EnvironmentManager makes mkdtemp("/tmp/python_env_XXXXXX") as it starts (not under
# $TMPDIR) and removes it only when the backend is finalized: a server ended during its load leaves it
PYTHON_ENV_GLOB = "/tmp/python_env_*"
# a glog line's time (local time, no year): I1129 22:27:30.168156; here that of the first model's load
FIRST_LOAD_RE = re.compile(r'^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?) .*"loading: ', re.MULTILINE)
# how far from that line the Python backend's directory is made (measured: 1 ms before it)
PYTHON_ENV_WINDOW = (-1.0, 0.5)
PROGRESS_SECONDS = 5.0  # how often `serve` says how the model load goes


# tritonserver's line when a model version fails to load (model_lifecycle.cc), its reason escaped as in a C
# string ("\n" a line break): the Python backend's reason is the exception, then "At:" and the traceback's
# frames, innermost first, one "  FILE(LINE): FUNCTION" each
FAILED_RE = re.compile(r"\"failed to load '([^']+)' version (\d+): (.*)\"\s*$", re.MULTILINE)
FRAME_RE = re.compile(r"^\s+(/.+?)\((\d+)\): \S")
# a SyntaxError as Python prints it: the message, then its file's name (no directory) and line
SYNTAX_RE = re.compile(r"^(\w+Error: .*) \(([^()/]+\.py), line (\d+)\)$")
# any error line of tritonserver's log (glog: severity E, date, time, thread, file:line] message)
ERROR_LINE_RE = re.compile(r'^E\d{4} [\d:.]+ +\d+ \S+\] "?(.*?)"?$', re.MULTILINE)
HARMLESS_ERRORS = ("CudaDriverHelper has not been initialized",)  # logged where there is no GPU
TRITON_STATUS = "Internal: "  # the status name Triton puts before a backend's error: noise to a user
CAUSE_LIMIT = 300  # the most characters of a cause quoted from the log


@dataclass(frozen=True)
class LoadFailure:
    """A model version that failed to load, from tritonserver's log: the first line of its cause, and the
    model's file and line it points at (the user's file: the repository links the model's directories)."""

    model: str
    version: str
    cause: str
    file: Path | None = None
    line: int | None = None

    def describe(self, shown: Callable[[Path], str] = str) -> str:
        where = f" ({shown(self.file)} line {self.line})" if self.file is not None else ""
        return f"model {self.model} version {self.version} failed to load: {self.cause}{where}"


def _unescape(text: str) -> str:
    """A reason as tritonserver's log escapes it (a JSON string's escapes), as text."""
    try:
        return str(json.loads(f'"{text}"'))
    except ValueError:
        return text.replace("\\n", "\n")


def _model_file(repository: Path, model: str, version: str, name: str) -> Path | None:
    """The file `name` (a SyntaxError gives no directory) of a model: in the version's directory, else
    anywhere in the model's; resolved through the repository's links to the user's file."""
    top = repository / model
    candidates = [top / version / name]
    for root, _dirs, files in os.walk(top, followlinks=True):
        candidates += [Path(root) / name] if name in files else []
    found = next((c for c in candidates if c.is_file()), None)
    return Path(os.path.realpath(found)) if found is not None else None


def load_failures(log: str, repository: Path) -> list[LoadFailure]:
    """The model versions tritonserver's log says failed to load, each once, with the cause and, for a
    Python model, the file and line of its own code the error comes from (a SyntaxError's location; else
    the innermost frame of the traceback inside the repository)."""
    found: dict[tuple[str, str], LoadFailure] = {}
    inside = f"{repository}{os.sep}"
    for model, version, escaped in FAILED_RE.findall(log):
        if (model, version) in found:
            continue
        lines = _unescape(escaped).splitlines() or [""]
        cause = lines[0].strip()
        cause = cause[len(TRITON_STATUS) :] if cause.startswith(TRITON_STATUS) else cause
        file, line = None, None
        syntax = SYNTAX_RE.match(cause)
        if syntax:
            file = _model_file(repository, model, version, syntax.group(2))
            cause, line = (syntax.group(1), int(syntax.group(3))) if file else (cause, None)
        if file is None:
            frames = [m for m in map(FRAME_RE.match, lines[1:]) if m and m.group(1).startswith(inside)]
            if frames:
                file, line = Path(os.path.realpath(frames[0].group(1))), int(frames[0].group(2))
        found[model, version] = LoadFailure(model, version, clip(cause, CAUSE_LIMIT), file, line)
    return list(found.values())


def last_error(log: str) -> str | None:
    """Why tritonserver exited, where no model failed to load: the first error it logged (an ERROR line,
    but the one every machine without a GPU logs), else its fatal `error: ...` line, else its last line."""
    errors = [e for e in ERROR_LINE_RE.findall(log) if not e.startswith(HARMLESS_ERRORS)]
    fatal = [line[len("error: ") :] for line in log.splitlines() if line.startswith("error: ")]
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    if errors:
        return clip((_unescape(errors[0]).splitlines() or [""])[0], CAUSE_LIMIT)
    return clip((fatal or lines)[-1], CAUSE_LIMIT) if fatal or lines else None


def first_load_time(log: str, now: float) -> float | None:
    """When tritonserver began loading its first model (its log's first `loading:` line), in seconds since
    the epoch; the year is `now`'s, or the one before where that would be in the future (New Year)."""
    found = FIRST_LOAD_RE.search(log)
    if found is None:
        return None
    month, day, hour, minute = (int(g) for g in found.groups()[:4])
    second = float(found.group(5))
    year = time.localtime(now).tm_year
    for y in (year, year - 1):
        at = time.mktime((y, month, day, hour, minute, int(second), 0, 0, -1)) + second % 1
        if at <= now + 60:
            return at
    return None


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
    # the Python backends' directories there before this server started: never this server's
    python_envs_before: frozenset[str] = field(default_factory=frozenset, repr=False)

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
        self.python_envs_before = frozenset(glob(PYTHON_ENV_GLOB))
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
                raise NotReady(
                    f"tritonserver exited (code {code}) before it was ready", self.log_tail(), exited=True
                )
            try:
                status, _ = self._get("/v2/health/ready")
                if status == 200:
                    with urllib.request.urlopen(self.metrics_url, timeout=5):
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        headline = f"tritonserver not ready after {timeout:g}s{self._loading()}"
        raise NotReady(headline, self.log_tail(), exited=False)

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
        processes running); then the shared-memory regions its Python backend left (`remove_shm`) and,
        when it did not end cleanly (killed during its load: SIGTERM ends it then), the Python backend's
        directory (`remove_python_env`)."""
        code = None if self.process is None else end_process(self.process, timeout)
        self.remove_shm()
        if code not in (0, None):
            self.remove_python_env()
        return code

    def remove_python_env(self) -> list[Path]:
        """Remove the Python backend's /tmp/python_env_* directory this server made and, ended during its
        load, did not remove: the one made as this server's log says it began loading models (within
        PYTHON_ENV_WINDOW), new since it started, owned by this user, and empty (rmdir)."""
        loaded = first_load_time(self.logs(), time.time())
        if loaded is None:
            return []
        removed = []
        for name in sorted(set(glob(PYTHON_ENV_GLOB)) - self.python_envs_before):
            try:
                info = os.lstat(name)
                ours = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
                if ours and PYTHON_ENV_WINDOW[0] <= info.st_mtime - loaded <= PYTHON_ENV_WINDOW[1]:
                    os.rmdir(name)
                    removed.append(Path(name))
            except OSError:
                continue
        return removed

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
