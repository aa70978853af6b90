"""Polling for a condition that a real component reaches asynchronously."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Call `fn` until it returns a truthy value and return that; AssertionError naming `what` and the
    last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
