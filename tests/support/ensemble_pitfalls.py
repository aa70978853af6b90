"""What tests/unit/test_ensemble_pitfalls.py and tests/component/test_ensemble_pitfalls.py share."""

from __future__ import annotations

from typing import Any


def expand(name: str = "expand") -> dict[str, Any]:
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": 8,
        "decoupled": True,
        "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
        "outputs": [{"name": "Y", "dataType": "FP32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
    }


def plain(name: str) -> dict[str, Any]:
    return {**expand(name), "decoupled": False}


def accumulator() -> dict[str, Any]:
    return {
        "name": "accumulator",
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [{"name": "VALUE", "dataType": "FP32", "dims": [1]}],
        "outputs": [{"name": "TOTAL", "dataType": "FP32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
        "sequenceBatching": {
            "strategy": "direct",
            "maxSequenceIdleMicroseconds": 5000000,
            "controls": {"start": "START", "end": "END", "correlationId": "CORRID"},
        },
    }


def pipeline(name: str, steps: list[dict[str, Any]], outputs: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
        "steps": steps,
        "outputs": [{"name": k, "from": v} for k, v in outputs.items()],
    }


AFTER = pipeline(
    "after",
    [
        {"model": "expand", "inputs": {"X": "inputs.X"}},
        {"model": "accumulator", "inputs": {"VALUE": "expand.Y"}},
    ],
    {"TOTAL": "accumulator.TOTAL"},
)


BEFORE = pipeline(
    "before",
    [
        {"model": "accumulator", "inputs": {"VALUE": "inputs.X"}},
        {"model": "expand", "inputs": {"X": "accumulator.TOTAL"}},
    ],
    {"Y": "expand.Y"},
)


def dequantize() -> dict[str, Any]:
    return {
        "name": "dequantize",
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [{"name": "CODES", "dataType": "INT32", "dims": [1]}],
        "outputs": [{"name": "VALUE", "dataType": "FP32", "dims": [1]}],
        "instances": [{"kind": "CPU", "count": 1}],
    }


# dequantize.VALUE goes to the accumulator and to a pipeline output: a router sits in front of the accumulator
BEHIND_ROUTER = {
    "name": "behind_router",
    "inputs": [{"name": "CHUNK", "dataType": "INT32", "dims": [1]}],
    "steps": [
        {"model": "dequantize", "inputs": {"CODES": "inputs.CHUNK"}},
        {"model": "accumulator", "inputs": {"VALUE": "dequantize.VALUE"}},
    ],
    "outputs": [
        {"name": "TOTAL", "from": "accumulator.TOTAL"},
        {"name": "VALUE", "from": "dequantize.VALUE"},
    ],
}


# --------------------------------------------------------------------------- order before a sequence step


def slow_first(name: str, count: int, preserve: bool | None) -> dict[str, Any]:
    """Y = X with the first chunk slow (tests/triton_models/slow_first_model.py); `preserve`: None is no
    dynamic batching, else dynamicBatching with that preserveOrdering."""
    m = {**plain(name), "instances": [{"kind": "CPU", "count": count}]}
    if preserve is not None:
        m["dynamicBatching"] = {"preserveOrdering": preserve}
    return m


def through(name: str, first: str) -> dict[str, Any]:
    return pipeline(
        name,
        [
            {"name": "first", "model": first, "inputs": {"X": "inputs.X"}},
            {"model": "accumulator", "inputs": {"VALUE": "first.Y"}},
        ],
        {"TOTAL": "accumulator.TOTAL"},
    )


# --------------------------------------------------------------------------- behind a condition

POSITIVE = {"tensor": "inputs.X", "greaterThan": 0}  # the branch of requests whose X is above 0


# a streaming branch beside a plain one, after a head (mid: Y = X): X > 0 takes expand, which answers twice
# (X + 1, X + 2); X < 0 takes low (Y = X), once; 0 takes neither: Y's default, once. ECHO is the head's.
STREAMED = {
    "name": "streamed",
    "inputs": [{"name": "X", "dataType": "FP32", "dims": [1]}],
    "steps": [
        {"name": "same", "model": "mid", "inputs": {"X": "inputs.X"}},
        {
            "name": "up",
            "model": "expand",
            "inputs": {"X": "same.Y"},
            "when": {"tensor": "same.Y", "greaterThan": 0},
        },
        {
            "name": "low",
            "model": "mid",
            "inputs": {"X": "inputs.X"},
            "when": {"tensor": "same.Y", "lessThan": 0},
        },
    ],
    "outputs": [
        {"name": "Y", "from": "up.Y", "orFrom": ["low.Y"], "default": 0.0},
        {"name": "ECHO", "from": "same.Y"},
    ],
}


# a sequence step behind a condition: the running total of a sequence's values above 0; -1 for the others
COUNTED = pipeline(
    "counted",
    [{"name": "total", "model": "accumulator", "inputs": {"VALUE": "inputs.X"}, "when": POSITIVE}],
    {},
)
COUNTED["outputs"] = [{"name": "TOTAL", "from": "total.TOTAL", "default": -1.0}]


# a sequence step in the head, its running total choosing the branch: BIG is the total once above 5
SUMMED = pipeline(
    "summed",
    [
        {"name": "total", "model": "accumulator", "inputs": {"VALUE": "inputs.X"}},
        {
            "name": "big",
            "model": "mid",
            "inputs": {"X": "total.TOTAL"},
            "when": {"tensor": "total.TOTAL", "greaterThan": 5},
        },
    ],
    {"TOTAL": "total.TOTAL"},
)
SUMMED["outputs"].append({"name": "BIG", "from": "big.Y", "default": -1.0})
