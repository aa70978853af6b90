"""What tests/unit/test_passed_through.py and tests/component/test_passed_through.py share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers import example

Obj = dict[str, Any]


def _pod(objects: dict[str, Obj]) -> Obj:
    return objects["Deployment"]["spec"]["template"]["spec"]


def _triton(objects: dict[str, Obj]) -> Obj:
    (container,) = [c for c in _pod(objects)["containers"] if c["name"] == "tritonserver"]
    return container


# spec field -> (where the renderer puts it, (value, refused by Kubernetes) ...)
CASES: dict[str, tuple[Callable[[dict[str, Obj], Any], None], list[tuple[Any, bool]]]] = {
    "server.resources": (
        lambda o, v: _triton(o).__setitem__("resources", v),
        [
            ({"requests": {"cpu": "500m", "memory": "1.5Gi"}, "limits": {"memory": "2Gi"}}, False),
            ({"requests": {"cpu": "1e3", "ephemeral-storage": 2}}, False),
            ({"requests": {"cpu": "lots"}}, True),
            ({"requests": {"memory": "2GB"}}, True),
            ({"limits": {"memory": "-1Gi"}}, True),
            ({"limits": {"cpu": -1}}, True),
            ({"requets": {"cpu": "1"}}, True),
            ({"requests": "1"}, True),
        ],
    ),
    "server.strategy": (
        lambda o, v: o["Deployment"]["spec"].__setitem__("strategy", v),
        [
            ({"type": "Recreate"}, False),
            ({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}, False),
            ({"type": "Teleport"}, True),
            ({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}, True),
            ({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}, True),
            ({"rollingUpdate": {"maxSurge": "lots"}}, True),
        ],
    ),
    "server.tolerations": (
        lambda o, v: _pod(o).__setitem__("tolerations", v),
        [
            ([{"operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoSchedule"}], False),
            ([{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}], False),
            ([{"operator": "Sometimes"}], True),
            ([{"key": "a", "operator": "Exists", "value": "b"}], True),
            ([{"value": "b"}], True),
            ([{"key": "a", "effect": "Sometimes"}], True),
            ([{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}], True),
        ],
    ),
    "server.affinity": (
        lambda o, v: _pod(o).__setitem__("affinity", v),
        [
            ({"podAffinity": {}}, False),
            ({"nodeAffinity": "yes"}, True),
            ({"nodeAfinity": {}}, True),
        ],
    ),
    "server.podSecurityContext": (
        lambda o, v: _pod(o)["securityContext"].update(v),
        [
            ({"fsGroup": 2000, "supplementalGroups": [3000]}, False),
            ({"fsGroup": -5}, True),
            ({"runAsUser": 2147483648}, True),
            ({"supplementalGroups": [1, -1]}, True),
        ],
    ),
    "networkPolicy.inference": (
        lambda o, v: o["NetworkPolicy"]["spec"]["ingress"][0].__setitem__("from", v),
        [
            ([{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"podSelector": {}}], False),
            ([{"ipBlock": {"cidr": "not-a-cidr"}}], True),
            ([{"ipBlock": {"cidr": "10.0.0.1"}}], True),
            ([{"podSelector": "x"}], True),
        ],
    ),
}


TABLE = [(field, value, refused) for field, (_, values) in CASES.items() for value, refused in values]


def _doc(namespace: str) -> Obj:
    doc = example("fanout", uri="pvc://models/triton")
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["networkPolicy"] = {"inference": [{"podSelector": {}}]}
    return doc
