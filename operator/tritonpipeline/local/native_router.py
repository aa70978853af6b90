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
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path, PurePosixPath

from ..compiler.plan_types import NATIVE_ROUTER_LIBRARY, NATIVE_ROUTER_SLOT
from .tritonserver import cache_root

SOURCE = "native_router.c"
CFLAGS = ("-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC")
# where an image that carries the library built for its architecture says it is (the Dockerfile sets it
# in the assembler and operator images): the init container puts it beside every native router
INSTALLED_ENV = "TRITONPIPELINE_NATIVE_ROUTER"
NOT_INSTALLED = (
    "the routers of this pipeline run on the native router, but this init container's image carries no "
    "native router library ({env} {why}): use an image built from the repository's Dockerfile as the "
    "assembler image (its target assembler, the chart's default when assemblerImage is empty, or the "
    "operator image), or set spec.server.router: python"
)


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


def installed(environ: Mapping[str, str] = os.environ) -> bytes:
    """The library this image carries (INSTALLED_ENV names it). Raises NativeRouterUnavailable, saying why,
    when the variable is unset or names no readable file."""
    path = environ.get(INSTALLED_ENV, "")
    if not path:
        raise NativeRouterUnavailable(NOT_INSTALLED.format(env=INSTALLED_ENV, why="is not set"))
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        why = f"names {path}: {exc.strerror or exc}"
        raise NativeRouterUnavailable(NOT_INSTALLED.format(env=INSTALLED_ENV, why=why)) from None


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


def fill_slots(files: Mapping[str, bytes], library: Callable[[], bytes] = installed) -> dict[str, bytes]:
    """`files` with the library in place of every NATIVE_ROUTER_SLOT (a repository rendered for a cluster);
    the library is read only when there is a slot. Raises NativeRouterUnavailable from `library`."""
    slots = [p for p in files if PurePosixPath(p).name == NATIVE_ROUTER_SLOT]
    if not slots:
        return dict(files)
    data = library()
    out = {p: b for p, b in files.items() if p not in slots}
    out.update({str(PurePosixPath(p).with_name(NATIVE_ROUTER_LIBRARY)): data for p in slots})
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    """`python -m tritonpipeline.local.native_router OUT`: build the library here and write it to OUT (the
    operator image's Dockerfile builds its own this way, with these flags)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tritonpipeline.local.native_router OUT", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as cache:
        try:
            library = build(Path(cache))
        except (NativeRouterUnavailable, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    out = Path(args[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(library)
    print(f"wrote {out} ({len(library)} bytes, {platform.machine()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
