"""What tests/unit/test_extras.py and tests/component/test_extras.py share."""

from __future__ import annotations

import subprocess
import sys


def without(modules: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where `modules` cannot be imported (as when not installed)."""
    block = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run(
        [sys.executable, "-c", block + code], capture_output=True, text=True, timeout=120, check=False
    )
