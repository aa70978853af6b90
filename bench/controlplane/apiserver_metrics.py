"""API requests per CR, from the apiserver's own counters (apiserver_request_total and
apiserver_request_duration_seconds on its /metrics)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from harness.controlplane import ControlPlane

ApiSnapshot = tuple[Counter[tuple[str, str, str]], Counter[tuple[str, str]]]


def api_snapshot(cp: ControlPlane) -> ApiSnapshot:
    """From the apiserver's /metrics: apiserver_request_total per (verb, resource[/subresource],
    code class) and apiserver_request_duration_seconds_sum per (verb, resource[/subresource])."""
    status, body = cp.get("/metrics", timeout=30)
    counts: Counter[tuple[str, str, str]] = Counter()
    seconds: Counter[tuple[str, str]] = Counter()
    if status != 200:
        return counts, seconds
    for line in body.splitlines():
        is_count = line.startswith("apiserver_request_total{")
        if not (is_count or line.startswith("apiserver_request_duration_seconds_sum{")):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        if not labels.get("resource"):
            continue  # /metrics, /readyz, discovery
        res = labels["resource"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        value = float(line.rsplit(" ", 1)[1])
        if is_count:
            code = labels.get("code", "")
            counts[(labels.get("verb", ""), res, code[:1] + "xx" if code else "")] += int(value)
        else:
            seconds[(labels.get("verb", ""), res)] += value
    return counts, seconds


def per_cr(
    before: ApiSnapshot, after: ApiSnapshot, n: int, own: dict[tuple[str, str], int]
) -> dict[str, Any]:
    """Requests per CR by 'VERB resource' (this script's own requests subtracted), the non-2xx ones,
    and the apiserver's request latency per CR by call (everything, this script's requests included)."""
    delta = after[0] - before[0]
    busy = after[1] - before[1]
    by_call: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for (verb, res, code), count in delta.items():
        if verb in ("WATCH", "CONNECT"):
            continue
        by_call[f"{verb} {res}"] += count
        if code and code != "2xx":
            errors[f"{verb} {res} {code}"] += count
    for (verb, res), count in own.items():
        by_call[f"{verb} {res}"] -= count
    total = sum(v for v in by_call.values() if v > 0)
    latency = {f"{verb} {res}": ms for (verb, res), ms in busy.items() if verb not in ("WATCH", "CONNECT")}
    return {
        "total": round(total / n, 2),
        "by_call": {k: round(v / n, 2) for k, v in sorted(by_call.items(), key=lambda kv: -kv[1]) if v > 0},
        "non_2xx": dict(errors),
        "apiserver_request_ms_per_cr": {
            k: round(v * 1000 / n, 2) for k, v in sorted(latency.items(), key=lambda kv: -kv[1]) if v > 0
        },
        "apiserver_request_ms_per_cr_total": round(sum(latency.values()) * 1000 / n, 1),
    }
