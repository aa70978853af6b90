"""What tests/unit/test_model_config_fields.py and tests/component/test_model_config_fields.py share."""

from __future__ import annotations

from typing import Any

from helpers import doc_of


def probe(name: str, reshape: list[int] | None) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": "IN", "dataType": "FP32", "dims": [1]}
    if reshape is not None:
        tensor["reshape"] = reshape
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [tensor],
        "outputs": [
            {"name": "RANK", "dataType": "INT32", "dims": [1]},
            {"name": "SCORES", "dataType": "FP32", "dims": [3], "labelFilename": "labels.txt"},
        ],
        "instances": [{"kind": "CPU", "count": 1}],
    }


def probe_doc() -> dict[str, Any]:
    pipelines = [
        {
            "name": f"{name}_pipeline",
            "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
            "steps": [{"model": name, "inputs": {"IN": "inputs.X"}}],
            "outputs": [
                {"name": "RANK", "from": f"{name}.RANK"},
                {"name": "SCORES", "from": f"{name}.SCORES"},
            ],
        }
        for name in ("reshaped", "plain")
    ]
    return doc_of("fields", [probe("reshaped", []), probe("plain", None)], pipelines)


def versioned(name: str, policy: dict[str, Any]) -> dict[str, Any]:
    """Y = X + the version number; two version directories, 1 and 2."""
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": 4,
        "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
        "outputs": [{"name": "Y", "dataType": "FP32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
        "versionPolicy": policy,
        "dynamicBatching": {
            "priorityLevels": 2,
            "defaultPriorityLevel": 2,
            "defaultQueuePolicy": {"maxQueueSize": 16, "timeoutAction": "REJECT"},
            "priorityQueuePolicies": [
                {"priorityLevel": 1, "timeoutAction": "DELAY", "defaultTimeoutMicroseconds": 5_000_000}
            ],
        },
    }


POLICIES = {
    "latest_one": ({"policy": "latest", "numVersions": 1}, {"2"}),
    "every": ({"policy": "all"}, {"1", "2"}),
    "only_first": ({"policy": "specific", "versions": [1]}, {"1"}),
}
