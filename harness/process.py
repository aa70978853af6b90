"""What every runner of a server process (etcd and kube-apiserver, nginx, Prometheus, HAProxy, CoreDNS,
MinIO, the OCI registry) shares: finding a Debian package's binary, the skip reason when it is missing,
starting the process and waiting until it is ready (`start_and_wait`), and ending it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonpipeline.local.tritonserver import end_process

TAIL_LINES = 60  # how much of a log an error shows by default


def system_binary(name: str, fallback: str) -> str | None:
    """`name` on PATH, else `fallback` (where Debian installs it) when executable, else None."""
    found = shutil.which(name)
    if found:
        return found
    return fallback if os.access(fallback, os.X_OK) else None


def missing_system_binary(name: str, fallback: str, package: str) -> str | None:
    """Why `name` cannot run here (the exact skip reason), or None."""
    if system_binary(name, fallback) is None:
        return (
            f"{name} is not installed (no `{name}` on PATH or {fallback}): run `make system-deps` as root "
            f"(Debian package {package})"
        )
    return None


def end(proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """End a process this harness started in its own session (local.tritonserver.end_process: by its PID,
    then what is left of its process group)."""
    if proc is not None:
        end_process(proc, timeout)


def log_tail(log: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of `log` ("" when it is not there)."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def start_and_wait(
    name: str,
    cmd: Sequence[str],
    ready: Callable[[], object],
    *,
    log: Path,
    timeout: float,
    tail: Callable[[], str] | None = None,
    interval: float = 0.1,
    not_ready: str = "not ready",
    error: type[Exception] = RuntimeError,
    alongside: Mapping[str, subprocess.Popen[bytes]] | None = None,
    append: bool = False,
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Start `cmd` in a session of its own (stdin closed, stdout and stderr to `log`, appended with
    `append`; `popen`: Popen's other arguments, e.g. env, cwd, preexec_fn) and poll `ready()` every
    `interval` seconds until it returns a true value; return the process.

    It raises `error` and ends the process (by its PID, then its group) when the process exits first
    ("<name> exited (<code>)"), when one of `alongside` (processes started before it that must keep
    running, by name) does, or when `timeout` seconds pass ("<name> <not_ready> within <timeout>s"); the
    message ends with `tail()` (default: the last TAIL_LINES lines of `log`)."""
    with open(log, "ab" if append else "wb") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **popen,
        )
    watched = {**(alongside or {}), name: proc}
    show = tail or (lambda: log_tail(log))
    deadline = time.monotonic() + timeout
    try:
        while True:
            for who, running in watched.items():
                if running.poll() is not None:
                    raise error(f"{who} exited ({running.returncode}):\n{show()}")
            if ready():
                return proc
            if time.monotonic() >= deadline:
                raise error(f"{name} {not_ready} within {timeout:g}s:\n{show()}")
            time.sleep(interval)
    except BaseException:
        end(proc, 10)
        raise


def pid_alive(pid: int, binary: str) -> bool:
    """True when `pid` runs `binary` (not a recycled pid of something else)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return Path(exe.removesuffix(" (deleted)")).name == Path(binary).name
