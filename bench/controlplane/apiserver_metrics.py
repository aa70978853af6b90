"""API requests per CR, from the apiserver's own counters (apiserver_request_total and
apiserver_request_duration_seconds on its /metrics)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from harness.controlplane import ControlPlane
from harness.paths import ROOT

# the chart's Roles and ClusterRoles, and the helpers that hold their rules
CHART_TEMPLATES = ROOT / "charts" / "triton-pipeline" / "templates"
CHART_ROLES = [*sorted(CHART_TEMPLATES.glob("*role.yaml")), CHART_TEMPLATES / "_helpers.tpl"]


def granted_by_chart(resource: str) -> bool:
    """Whether a Role or ClusterRole of the chart names `resource`: a request on one it names nowhere
    (leases) is not the operator's as deployed."""
    return any(re.search(rf"\b{re.escape(resource)}\b", p.read_text()) for p in CHART_ROLES)


ApiSnapshot = tuple[Counter[tuple[str, str, str]], dict[tuple[str, str], float]]


def api_snapshot(cp: ControlPlane) -> ApiSnapshot:
    """From the apiserver's /metrics: apiserver_request_total per (verb, resource[/subresource],
    code class) and apiserver_request_duration_seconds_sum per (verb, resource[/subresource])."""
    status, body = cp.get("/metrics", timeout=30)
    counts: Counter[tuple[str, str, str]] = Counter()
    seconds: dict[tuple[str, str], float] = {}
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
            key = (labels.get("verb", ""), res)
            seconds[key] = seconds.get(key, 0.0) + value
    return counts, seconds


def per_cr(
    before: ApiSnapshot, after: ApiSnapshot, n: int, own: dict[tuple[str, str], int]
) -> dict[str, Any]:
    """Requests per CR by 'VERB resource' (this script's own requests subtracted), the non-2xx ones,
    and the apiserver's request latency per CR by call (everything, this script's requests included)."""
    delta = after[0] - before[0]
    busy = {k: v - before[1].get(k, 0.0) for k, v in after[1].items() if v > before[1].get(k, 0.0)}
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


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})


def by_call(before: ApiSnapshot, after: ApiSnapshot) -> tuple[Counter[str], Counter[str]]:
    """Requests between two snapshots by 'VERB resource' (watches and connects left out), and the non-2xx
    ones by 'VERB resource code-class'."""
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for (verb, res, code), count in (after[0] - before[0]).items():
        if verb in ("WATCH", "CONNECT"):
            continue
        calls[f"{verb} {res}"] += count
        if code and code != "2xx":
            errors[f"{verb} {res} {code}"] += count
    return calls, errors


def is_write(call: str) -> bool:
    return call.split(" ", 1)[0] in WRITE_VERBS


def rates(
    before: ApiSnapshot,
    after: ApiSnapshot,
    seconds: float,
    pipelines: int,
    background_per_minute: dict[str, float],
    own: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The requests of a window, per pipeline per minute: everything the apiserver counted
    (`raw_by_call`), less `own` (this script's) and the apiserver's own background requests
    (`background_per_minute`, measured with no operator running, scaled to the window) = the operator's
    (`operator_by_call`), their totals and writes per pipeline per minute, and the non-2xx ones."""
    calls, errors = by_call(before, after)
    minutes = seconds / 60
    net: dict[str, float] = {}
    for call, count in calls.items():
        if call in background_per_minute and not granted_by_chart(call.split(" ", 1)[1]):
            continue  # the apiserver's own (its lease renewals, more often after a failed one)
        expected = background_per_minute.get(call, 0.0) * minutes
        # a periodic background request (the apiserver's lease every 10 s) lands once more or less in a
        # window than its rate says: that much is the background's
        slack = max(1.0, 0.1 * expected) if expected else 0.0
        value = count - (own or {}).get(call, 0) - expected
        if value > slack + 0.5:
            net[call] = value
    per = max(pipelines, 1) * minutes
    total = sum(net.values())
    writes = sum(v for k, v in net.items() if is_write(k))
    return {
        "window_s": round(seconds, 1),
        "pipelines": pipelines,
        "raw_by_call": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
        "own_by_call": own or {},
        "background_by_call": {k: round(v * minutes, 1) for k, v in background_per_minute.items()},
        "operator_by_call": {k: round(v, 1) for k, v in sorted(net.items(), key=lambda kv: -kv[1])},
        "operator_requests": round(total, 1),
        "operator_writes": round(writes, 1),
        "requests_per_pipeline_per_minute": round(total / per, 4),
        "writes_per_pipeline_per_minute": round(writes / per, 4),
        "by_call_per_pipeline_per_minute": {
            k: round(v / per, 4) for k, v in sorted(net.items(), key=lambda kv: -kv[1])
        },
        "writes_by_call_per_pipeline_per_minute": {
            k: round(v / per, 4) for k, v in sorted(net.items(), key=lambda kv: -kv[1]) if is_write(k)
        },
        "non_2xx": dict(errors),
    }


def per_minute(before: ApiSnapshot, after: ApiSnapshot, seconds: float) -> dict[str, float]:
    """Requests per minute by 'VERB resource' between two snapshots (the apiserver's background)."""
    calls, _ = by_call(before, after)
    return {k: round(v * 60 / seconds, 3) for k, v in calls.items() if v}


def webhook_calls(cp: ControlPlane, webhook: str) -> tuple[int, float]:
    """How many times the apiserver called admission webhook `webhook`, and the seconds those calls took
    (apiserver_admission_webhook_admission_duration_seconds _count and _sum, every label summed)."""
    status, body = cp.get("/metrics", timeout=30)
    count, seconds = 0, 0.0
    if status != 200:
        return count, seconds
    prefix = "apiserver_admission_webhook_admission_duration_seconds_"
    for line in body.splitlines():
        if not line.startswith(prefix) or f'name="{webhook}"' not in line:
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith(prefix + "count{"):
            count += int(value)
        elif line.startswith(prefix + "sum{"):
            seconds += value
    return count, seconds
