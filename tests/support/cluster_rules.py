"""What tests/unit/test_cluster_rules.py and tests/component/test_cluster_rules.py share."""

from __future__ import annotations

from typing import Any

PVC = "pvc://models/triton"  # a cluster model repository: nothing is read from the local disk


def _header(doc: dict[str, Any], name: str) -> None:
    doc["metadata"]["name"] = name
    doc["spec"]["routing"] = {"sessionAffinity": "Header", "provider": "istio"}
