"""What tests/unit/test_reapply_skipped.py and tests/component/test_reapply_skipped.py share."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import example
from tritonpipeline.runtime import log_events as events


def _doc(namespace: str = "team", name: str = "fanout") -> dict[str, Any]:
    doc = example("fanout", "pvc://models/triton")
    doc["metadata"].update(namespace=namespace, name=name)
    return doc


def _skipped(caplog: pytest.LogCaptureFixture) -> list[str]:
    prefix = events.REAPPLY_SKIPPED.format(why="")
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]
