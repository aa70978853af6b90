"""Summaries of latency samples and of rounds."""

from __future__ import annotations

import statistics
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


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
