"""Where a request's time goes inside one tritonserver: Triton's own per-model statistics (its statistics
API, an administrative API that needs the key), read before and after a run and turned into mean
microseconds per request in each phase.

For a Python-backend model compute_infer is the round trip to its stub; for a native backend, the
backend's own execute. An ensemble's statistics add up its steps' compute phases, so the time between
its steps (scheduling, allocating, freeing) is its request time minus what its steps report.
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

PHASES = ("queue", "compute_input", "compute_infer", "compute_output")

# one model's counters: requests, executions and nanoseconds per phase (plus "request", the success total)
Counters = dict[str, int]
Snapshot = dict[str, Counters]


def http_getter(http_url: str, headers: dict[str, str]) -> Callable[[str], Any]:
    """A GET of a path on tritonserver's HTTP endpoint (host:port), with the admin key's headers, as JSON."""

    def get(path: str) -> Any:
        request = urllib.request.Request(f"http://{http_url}{path}", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    return get


def snapshot(get: Callable[[str], Any], models: Iterable[str]) -> Snapshot:
    """Each model's cumulative counters now, summed over its versions."""
    out: Snapshot = {}
    for model in models:
        counters: Counters = {
            "requests": 0,
            "inferences": 0,
            "executions": 0,
            "request": 0,
            **dict.fromkeys(PHASES, 0),
        }
        for version in get(f"/v2/models/{model}/stats")["model_stats"]:
            stats = version["inference_stats"]
            counters["requests"] += int(stats["success"]["count"])
            counters["request"] += int(stats["success"]["ns"])
            counters["inferences"] += int(version.get("inference_count", 0))  # rows: a batch's each
            counters["executions"] += int(version.get("execution_count", 0))
            for phase in PHASES:
                counters[phase] += int(stats[phase]["ns"])
        out[model] = counters
    return out


def per_request(after: Snapshot, before: Snapshot | None = None) -> dict[str, dict[str, float]]:
    """Mean microseconds per request in each phase (and "request", the whole), requests, inferences
    (rows) and executions,
    for each model between two snapshots (from the server's start without `before`)."""
    out: dict[str, dict[str, float]] = {}
    for model, now in after.items():
        then = (before or {}).get(model, {})
        diff = {k: v - then.get(k, 0) for k, v in now.items()}
        n = diff["requests"]
        out[model] = {
            **{p: round(diff[p] / n / 1000, 1) if n else 0.0 for p in ("request", *PHASES)},
            "requests": n,
            "inferences": diff["inferences"],
            "executions": diff["executions"],
        }
    return out


def median(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each model's per_request figures, the median over rounds."""
    return {
        model: {k: float(statistics.median(r[model][k] for r in rounds)) for k in rounds[0][model]}
        for model in rounds[0]
    }


def table_rows(label: list[str], steps: dict[str, dict[str, float]]) -> list[list[str]]:
    """Rows for harness.load.format_table under TABLE_HEADERS, each model's row after `label`."""
    return [
        [
            *label,
            model,
            *(f"{t[p]:.0f}" for p in ("request", *PHASES)),
            f"{t['requests'] / max(1, t['executions']):.2f}",
        ]
        for model, t in steps.items()
    ]


TABLE_HEADERS = ["model", "request us", *(f"{p} us" for p in PHASES), "requests/execution"]
