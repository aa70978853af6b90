"""What every runner of a host program (nginx, Prometheus, HAProxy, CoreDNS) shares: finding a Debian
package's binary, the skip reason when it is missing, and ending the process it started."""

from __future__ import annotations

import os
import shutil
import subprocess

from tritonpipeline.local.tritonserver import end_process


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
