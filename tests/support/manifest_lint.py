"""What tests/unit/test_manifest_lint.py and tests/component/test_manifest_lint.py share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# ----------------------------------------------------------------------------------- the exceptions file


def _exceptions(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "exceptions.yaml"
    path.write_text(yaml.safe_dump(entries))
    return path
