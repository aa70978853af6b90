"""Where the repository's parts are, for the harness modules."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "tritonpipeline"  # this venv's entry point
E2E = ROOT / "e2e"  # the build scripts (build-controlplane.sh, build-gotool.sh, build-node.sh) and Go modules


def cache_root() -> Path:
    """Where built tools are cached outside the repository (the build scripts use the same):
    tritonpipeline.local.tritonserver.cache_root()."""
    from tritonpipeline.local.tritonserver import cache_root as root

    return root()
