"""Summaries of latency samples and of rounds."""

from __future__ import annotations

import statistics
from typing import Any

from harness.load import percentile


def summary(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "min": None, "max": None, "mean": None}
    return {
        "n": len(xs),
        "p50": round(percentile(xs, 50), 4),
        "p99": round(percentile(xs, 99), 4),
        "min": round(min(xs), 4),
        "max": round(max(xs), 4),
        "mean": round(statistics.fmean(xs), 4),
    }


def median_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    xs = [r[key] for r in rounds if r.get(key) is not None]
    return round(statistics.median(xs), 3) if xs else None
