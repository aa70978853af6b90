"""What tests/unit/test_webhook.py and tests/component/test_webhook.py share."""

from __future__ import annotations

from typing import Any

from helpers import example
from unit.test_spec_errors import CASES, Case


def cluster_doc(base: str, name: str = "p", namespace: str | None = None) -> dict[str, Any]:
    doc = example(base, uri="pvc://models/triton")
    doc["metadata"] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return doc


def mutated(case: Case, name: str = "p", namespace: str | None = None) -> dict[str, Any]:
    doc = cluster_doc(case.base, name, namespace)
    case.mutate(doc)
    return doc


def cyclic(name: str = "cyclic", namespace: str | None = None) -> dict[str, Any]:
    (case,) = [c for c in CASES if c.id == "cycle-two-steps"]
    return mutated(case, name, namespace)
