"""Build the native router (compiler/native_router.c) for this machine: `gcc -O2 -shared -fPIC`, one
file, no other step; cached by source, compiler and architecture under the tool cache, so a second build
is a file read. compile_pipeline(..., native_router=build()) then runs every router on it."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from ..compiler.plan_types import NATIVE_ROUTER_LIBRARY
from .server import cache_root

SOURCE = "native_router.c"
CFLAGS = ("-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC")


class NativeRouterUnavailable(RuntimeError):
    """No C compiler here: the routers stay on the Python backend. The message says why."""


def source() -> bytes:
    return resources.files("tritonpipeline.compiler").joinpath(SOURCE).read_bytes()


def cache_dir() -> Path:
    return cache_root() / "native-router"


def compiler() -> str:
    found = shutil.which(os.environ.get("CC", "gcc"))
    if found is None:
        raise NativeRouterUnavailable(
            f"no C compiler ({os.environ.get('CC', 'gcc')} not on PATH): install gcc (Debian package gcc) "
            "to build the native router"
        )
    return found


def build(cache: Path | None = None) -> bytes:
    """The library's bytes for this machine's architecture, built once per source, compiler and
    architecture. Raises NativeRouterUnavailable without a C compiler, RuntimeError when it fails."""
    cc = compiler()
    version = subprocess.run([cc, "-dumpfullversion"], capture_output=True, text=True, check=False).stdout
    code = source()
    key = hashlib.sha256(
        b"\0".join([code, version.encode(), platform.machine().encode(), *map(str.encode, CFLAGS)])
    )
    target = (cache or cache_dir()) / key.hexdigest()[:16] / NATIVE_ROUTER_LIBRARY
    if target.is_file():
        return target.read_bytes()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / SOURCE
        src.write_bytes(code)
        out = Path(tmp) / NATIVE_ROUTER_LIBRARY
        proc = subprocess.run(
            [cc, *CFLAGS, "-o", str(out), str(src)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"building the native router failed ({cc}): {proc.stderr.strip()[-2000:]}")
        os.replace(out, target)
    return target.read_bytes()
