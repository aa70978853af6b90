"""What tests/unit/test_crd_skew.py and tests/component/test_crd_skew.py share."""

from __future__ import annotations

import copy
from typing import Any

# what a future release adds under the evolution policy: an optional field with a default (filled in on
# every stored pipeline by the API server), one in every list item, and a new optional object
FUTURE_SETTING = "spec.server.someFutureSetting"


FUTURE_FLAG = "spec.models[*].futureFlag"


FUTURE_OBJECT = "spec.futureObject"


def with_future_fields(doc: dict[str, Any], future_object: bool = True) -> dict[str, Any]:
    """A pipeline as the API server serves it under the newer CRD (its defaults filled in)."""
    out = copy.deepcopy(doc)
    out["spec"]["server"]["someFutureSetting"] = "x"
    for model in out["spec"]["models"]:
        model["futureFlag"] = False
    if future_object:
        out["spec"]["futureObject"] = {"mode": "fast"}
    return out
