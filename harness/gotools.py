"""The Go toolchain and the tools e2e/build-gotool.sh builds from Go modules (helm, kind, third-party
CRDs), cached per pinned version outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .paths import E2E

BUILD_TOOL = E2E / "build-gotool.sh"
FIND_GO = E2E / "find-go.sh"


def find_go() -> str | None:
    """The Go toolchain the build scripts use (e2e/find-go.sh decides), or None."""
    script = '. "$1"; printf %s "$GO"'  # the path goes in as an argument, not into the script
    found = subprocess.run(
        ["bash", "-c", script, "find-go", str(FIND_GO)], capture_output=True, text=True, check=False
    ).stdout
    return found or None


def go_env() -> dict[str, str]:
    """This process's environment with Go's directory first on PATH (Go may live outside PATH)."""
    env = dict(os.environ)
    go = find_go()
    if go:
        env["PATH"] = f"{Path(go).parent}:{env.get('PATH', '')}"
    return env


class ToolUnavailable(RuntimeError):
    """Go is missing and the tool is not built: tests skip with this message."""


class ToolError(RuntimeError):
    """Building or running a tool failed."""


def tool_path(tool: str) -> Path:
    """Where e2e/build-gotool.sh keeps `tool` (helm, kind, servicemonitor-crd) for its pinned version."""
    out = subprocess.run(
        ["bash", str(BUILD_TOOL), tool, "--print-path"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def missing_tool(tool: str) -> str | None:
    """Why `tool` cannot be had here, or None. Exact, so a skip message says what to do."""
    path = tool_path(tool)
    if path.exists():
        return None
    if find_go() is None:
        return (
            f"{tool} is not built ({path} is missing) and Go is not installed (no `go` on PATH or "
            f"/usr/local/go/bin/go) to build it; install Go and run `make helm`"
        )
    return None


def ensure_tool(tool: str, output: Any = None) -> Path:
    """The cached tool, built first with e2e/build-gotool.sh when missing (a few minutes for helm)."""
    reason = missing_tool(tool)
    if reason:
        raise ToolUnavailable(reason)
    path = tool_path(tool)
    if path.exists():
        return path
    proc = subprocess.run(
        ["bash", str(BUILD_TOOL), tool],
        env=go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = output if output is not None else sys.stdout
    out.write(proc.stdout)
    out.flush()
    if proc.returncode != 0 or not path.exists():
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise ToolError(f"{BUILD_TOOL} {tool} failed (exit {proc.returncode}):\n{tail}")
    return path
