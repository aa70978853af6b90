"""Mermaid for the docs site, bundled so that its diagrams render offline (issue 55).

Material for MkDocs draws a page's Mermaid diagrams with mermaid.min.js, which it fetches from a CDN when
the page is viewed unless the page already defines `mermaid`. `make docs` runs this module first: it
fetches the npm registry's `mermaid` package with npm (`npm pack`, the version and the tarball's sha512
pinned below), checks it, and caches its dist/mermaid.min.js and LICENSE under the tool cache;
tools/mkdocs_hooks.py copies them into the site and loads the script on each page that has a diagram,
before Material's bundle, so the site references no CDN for it.

`python tools/mermaid.py` fetches (once) and prints the cached script's path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tritonpipeline.local.tritonserver import cache_root

VERSION = "11.17.2"  # Material 9.x loads mermaid@11; its newest release when pinned
# `npm view mermaid@VERSION dist.integrity`: the registry's sha512 of the package's tarball
INTEGRITY = "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg=="
FILES = {"package/dist/mermaid.min.js": "mermaid.min.js", "package/LICENSE": "LICENSE"}  # tarball -> cache
SITE_DIR = "assets/mermaid"  # where the site carries them
NO_NPM = (
    "the docs bundle Mermaid from the npm registry and npm is not installed: install it (Debian: apt-get "
    "install npm; `make system-deps` does) and run `make docs` again"
)


def cache_dir() -> Path:
    """This version's files, under the tool cache (TRITONPIPELINE_CACHE, else ~/.cache/tritonpipeline)."""
    return cache_root() / "mermaid" / VERSION


def cached() -> Path | None:
    """The cached mermaid.min.js, or None before `fetch`."""
    found = cache_dir()
    return found / "mermaid.min.js" if all((found / name).is_file() for name in FILES.values()) else None


def integrity(data: bytes) -> str:
    """npm's integrity string of a tarball (Subresource Integrity: sha512, base64)."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch() -> Path:
    """The cached mermaid.min.js: fetched with `npm pack` and checked against INTEGRITY the first time."""
    found = cached()
    if found is not None:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(f"error: {NO_NPM}")
    target = cache_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        packed = subprocess.run(
            [npm, "pack", f"mermaid@{VERSION}", "--json", "--pack-destination", tmp],
            capture_output=True,
            text=True,
            cwd=tmp,
            check=False,
        )
        if packed.returncode != 0:
            why = (packed.stderr.strip().splitlines() or [f"exit code {packed.returncode}"])[-1]
            raise SystemExit(f"error: npm pack mermaid@{VERSION} failed: {why}")
        tarball = Path(tmp) / json.loads(packed.stdout)[0]["filename"]
        data = tarball.read_bytes()
        if integrity(data) != INTEGRITY:
            raise SystemExit(
                f"error: mermaid@{VERSION} from npm is not the pinned package: {integrity(data)}"
            )
        unpacked = Path(tmp) / "files"
        unpacked.mkdir()
        with tarfile.open(tarball, "r:gz") as archive:
            for member, name in FILES.items():
                source = archive.extractfile(member)
                if source is None:
                    raise SystemExit(f"error: mermaid@{VERSION}'s package has no {member}")
                (unpacked / name).write_bytes(source.read())
        shutil.rmtree(target, ignore_errors=True)  # what an interrupted fetch left
        os.replace(unpacked, target)  # whole or not at all
    found = cached()
    assert found is not None
    return found


if __name__ == "__main__":
    print(fetch())
    sys.exit(0)
