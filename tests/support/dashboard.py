"""What tests/unit/test_dashboard.py and tests/component/test_dashboard.py share."""

from __future__ import annotations

import json
from typing import Any

from harness.helm import CHART

SHIPPED = CHART / "files" / "grafana-dashboard.json"


SUMMARY_LATENCIES = "--metrics-config=summary_latencies=true"  # what the p50/p99 panels tell users to set


def shipped_board() -> dict[str, Any]:
    """The dashboard the chart ships, as Grafana reads it."""
    return json.loads(SHIPPED.read_text())
