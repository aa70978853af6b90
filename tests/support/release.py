"""What tests/unit/test_release.py and tests/component/test_release.py share."""

from __future__ import annotations

import tarfile
from pathlib import Path


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
