"""What every runner of a host program (nginx, Prometheus, HAProxy, CoreDNS) shares: finding a Debian
package's binary, the skip reason when it is missing, and ending the process it started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess


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
    """SIGTERM to a process this harness started (by its PID), then SIGKILL to its process group
    after `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
