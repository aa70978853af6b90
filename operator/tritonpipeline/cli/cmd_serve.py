"""`tritonpipeline serve`: serve a pipeline on a local tritonserver, no cluster needed; everything it made
is removed when it stops."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from .. import extras
from ..compiler import tracing
from ..errors import Problem, SpecError, quote, reason
from ..local.repository import write_repository
from ..render.meta import GRPC_PORT, HTTP_PORT, METRICS_PORT
from ..spec import Tracing
from ..triton import security, tritonserver_options
from .arguments import add_file, add_models, add_name, ip_address, output_path, port, seconds, whole_seconds
from .common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVER,
    Compiled,
    compile_file,
    error,
    protected,
    routing_lines,
    select,
    with_router,
)

NAME = "serve"
EXAMPLES = (
    (
        "tritonpipeline serve examples/fanout.yaml --cpu",
        "serve it on a local tritonserver (127.0.0.1:8000 HTTP, 8001 gRPC, 8002 metrics), no cluster",
    ),
    (
        "tritonpipeline serve examples/diamond.yaml --http-port 9000 --grpc-port 9001 --metrics-port 9002",
        "on other ports",
    ),
    (
        "tritonpipeline serve examples/fanout.yaml --models model_repository --timeout 600 --keep",
        "model files from another directory, a longer load, and keep the repository and log",
    ),
)

SERVE_PORT_FLAGS = ("--http-port", "--grpc-port", "--metrics-port")
SERVE_PORT_IN_USE = (
    "{flag} {port}: {host}:{port} cannot be bound ({why}): another server listens there; choose another port"
)


def check_ports(args: argparse.Namespace) -> None:
    """Each of serve's servers needs a port of its own (a usage error otherwise)."""
    ports = {flag: getattr(args, flag.lstrip("-").replace("-", "_")) for flag in SERVE_PORT_FLAGS}
    seen: dict[int, str] = {}
    for flag, number in ports.items():
        if number in seen:
            args.usage_error(f"{seen[number]} and {flag} are both {number}: each server needs its own port")
        seen[number] = flag


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        NAME, help="serve a pipeline on a local tritonserver (no cluster needed)"
    )
    add_file(p)
    add_name(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--cpu", dest="cpu", action="store_true", default=None, help="run GPU instance groups on CPU"
    )
    mode.add_argument("--gpu", dest="cpu", action="store_false", help="keep GPU instance groups")
    p.add_argument(
        "--host", type=ip_address, default="127.0.0.1", help="IP address to bind (default 127.0.0.1)"
    )
    p.add_argument("--http-port", type=port, default=HTTP_PORT, help="1-65535 (default %(default)s)")
    p.add_argument("--grpc-port", type=port, default=GRPC_PORT, help="1-65535 (default %(default)s)")
    p.add_argument("--metrics-port", type=port, default=METRICS_PORT, help="1-65535 (default %(default)s)")
    p.add_argument("--timeout", type=seconds, default=180, help="seconds to wait for readiness")
    p.add_argument(
        "--exit-timeout", type=whole_seconds, default=10, help="seconds Triton waits for in-flight requests"
    )
    p.add_argument("--keep", action="store_true", help="keep the rendered repository and log")
    p.add_argument(
        "--trace-file",
        metavar="PATH",
        type=output_path,
        help="with spec.server.tracing mode triton: where Triton writes its trace file (default: "
        "NAME-trace.json in the current directory)",
    )
    p.add_argument(
        "--router",
        choices=("auto", "native", "python"),
        default="auto",
        help="what the routers and conditions run on: the native router (a C backend built here with gcc, "
        "cached) or the Python backend; auto: native when it builds here (default)",
    )
    add_models(p)
    p.set_defaults(usage_error=p.error)
    return p


def _gpu_present() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists()


def execute(args: argparse.Namespace) -> int:
    check_ports(args)
    from ..local.tritonserver import HOME_ENV

    if not os.environ.get(HOME_ENV):  # a tritonserver tree of its own needs no wheel's (NVIDIA's image)
        extras.need("serve", "tritonpipeline serve")
    from ..local.tritonserver import (
        TritonError,
        installed_numpy,
        missing_backends,
        numpy_warning,
        port_in_use,
        server_home,
    )

    cpu = args.cpu if args.cpu is not None else not _gpu_present()
    c = select(compile_file(args.file, cpu_only=cpu, models=args.models), args.name, args.file)
    if c.model_root is None:
        raise SpecError(
            [
                Problem(
                    "spec.modelRepository.uri",
                    f"serve needs local model files, got "
                    f"{c.pipeline.spec.model_repository.uri!r}; pass --models DIR",
                )
            ],
            args.file,
        )
    try:
        home = server_home()
    except TritonError as exc:
        error(str(exc))
        return EXIT_SERVER
    lacking = missing_backends(c.pipeline.spec.models, home, c.model_root)
    if lacking:
        raise SpecError(lacking, args.file)
    for port_flag in SERVE_PORT_FLAGS:  # before any model loads: tritonserver finds out after all have
        number = getattr(args, port_flag.lstrip("-").replace("-", "_"))
        busy = port_in_use(args.host, number)
        if busy:
            message = SERVE_PORT_IN_USE.format(flag=port_flag, host=args.host, port=number, why=busy)
            error(message)
            return EXIT_SERVER
    if cpu and args.cpu is None:
        print("no GPU found: GPU instance groups run on the CPU (pass --gpu to keep them)")
    c = with_router(c, args.router, cpu)
    warning = numpy_warning(installed_numpy())
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return _serve(c, args)


# the signals that stop `serve`; from its first temporary file on, each only asks to stop, so that what it
# made is removed whenever one comes (issue 55: a stop during the load left /dev/shm regions behind)
SERVE_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SERVE_TEMP_PREFIX = "tritonpipeline-serve-"  # serve's work directory and log in the temporary directory


def shown_path(path: Path) -> str:
    """A path for a message: relative to the current directory when it is under it, as the user names it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _tracing_line(traced: Tracing, trace_file: Path) -> str:
    """Where serve's traces go, in words."""
    every = "every request" if traced.rate == 1 else f"1 request in {traced.rate}"
    levels = "+".join(traced.level)
    if traced.mode == "triton":
        return f"Triton's trace file {shown_path(trace_file)} ({levels}, {every})"
    where = traced.url or "http://localhost:4318/v1/traces (Triton's default)"
    return f"OpenTelemetry spans to {where} ({levels}, {every})"


def _serve(c: Compiled, args: argparse.Namespace) -> int:
    """Assemble the repository in a temporary directory, run tritonserver on it until a signal, and
    remove what it made: the work directory (repository, admin key), the log, the Python backend's
    shared memory; after a failure, the log stays and the error line names it (--keep keeps all)."""
    from ..local.tritonserver import (
        Interrupted,
        LocalTriton,
        NotReady,
        TritonError,
        last_error,
        load_failures,
    )

    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in SERVE_SIGNALS}
    workdir: Path | None = None
    log: Path | None = None
    server: LocalTriton | None = None
    failed = False  # keep the log, which the error names
    try:
        try:
            workdir = Path(tempfile.mkdtemp(prefix=SERVE_TEMP_PREFIX))
            fd, name = tempfile.mkstemp(prefix=f"{SERVE_TEMP_PREFIX}{c.pipeline.name}-", suffix=".log")
            os.close(fd)
            log = Path(name)
        except OSError as exc:
            where = quote(tempfile.gettempdir())
            raise SpecError.one(f"cannot create a work directory in {where}: {reason(exc)}") from None
        repo = write_repository(
            c.artifacts, workdir / "repository", c.model_root, protect=protected(args.file)
        )
        print(f"compiled {c.pipeline.name!r}: {len(c.artifacts.files)} generated files in {repo}")
        server_args, left_out = tritonserver_options.for_serve(c.pipeline.spec.server.args)
        for flag, why in left_out:
            print(f"note: spec.server.args[{flag.index}] {flag.text} is not used locally ({why})")
        traced = c.pipeline.spec.server.tracing
        trace_file = Path(args.trace_file or f"{c.pipeline.name}-trace.json").absolute()
        server_args = [*tracing.trace_args(traced, c.pipeline.name, str(trace_file)), *server_args]
        if traced is not None:
            print(f"tracing: {_tracing_line(traced, trace_file)}")
        for line in routing_lines(c.artifacts):
            print(line)
        server = LocalTriton(
            repo,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            host=args.host,
            log_file=log,
            extra_args=[f"--exit-timeout-secs={args.exit_timeout}", *server_args],
        )
        if stop.is_set():
            raise Interrupted("interrupted before tritonserver started")
        print(f"starting tritonserver (log: {log}) ...", flush=True)
        server.start()
        server.wait_ready(
            timeout=args.timeout, stop=stop.is_set, progress=lambda line: print(line, flush=True)
        )
        print(f"ready: HTTP http://{server.http_url}  gRPC {server.grpc_url}  metrics {server.metrics_url}")
        key_file = security.write_key(workdir, server.admin_key or "")
        print(
            f"admin APIs ({', '.join(security.ADMIN_APIS)}) need the key in {key_file} (mode 0600) as "
            f"header {security.ADMIN_HEADER!r} (gRPC metadata {security.header_name('grpc')!r}); "
            f"{', '.join(security.OPEN_APIS)} are open"
        )
        for m in server.models():
            print(f"  model {m['name']:<40} version {m.get('version', '-'):<3} {m.get('state', '')}")
        print("serving; Ctrl-C or SIGTERM stops", flush=True)
        while not stop.wait(0.5):
            if server.process is not None and server.process.poll() is not None:
                failed = True
                why = last_error(server.logs()) or "no cause in its log"
                code = server.process.returncode
                error(f"tritonserver exited (code {code}) while serving: {why}; full log: {log}")
                return EXIT_SERVER
        print("stopping tritonserver ...", flush=True)
        code = server.stop(timeout=args.exit_timeout + 5)
        print(f"stopped (tritonserver exit code {code})")
        return EXIT_OK
    except Interrupted as exc:
        print(f"{exc}: stopping tritonserver", file=sys.stderr)
        return EXIT_INTERRUPTED
    except NotReady as exc:  # one line a model that failed (its file and line), not the log's tail
        failed = True
        logged = server.logs() if server is not None else ""
        causes = [f.describe(shown_path) for f in load_failures(logged, server.repository)] if server else []
        if exc.exited and not causes:
            causes = [f"{exc.headline}: {last_error(logged) or 'no cause in its log'}"]
        for cause in causes if exc.exited else [exc.headline, *causes]:
            error(f"{cause}; full log: {log}")
        return EXIT_SERVER
    except TritonError as exc:
        failed = True
        error(f"{exc}; full log: {log}")
        return EXIT_SERVER
    except OSError as exc:
        error(f"cannot serve from {quote(workdir)}: {reason(exc)}")
        return EXIT_SERVER
    finally:
        if server is not None:
            server.stop(timeout=5)
        if args.keep:
            print(f"kept {workdir} (the repository, admin key) and {log}: remove them when done")
        else:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            if log is not None and not failed:
                log.unlink(missing_ok=True)
        for s, h in old.items():
            signal.signal(s, h)
