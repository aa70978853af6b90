"""Which generated model serves which branch of a pipeline with conditions: the one place that maps the
ensembles compiler/branches.py plans (`PIPELINE__when<k>`) back to what the user wrote (the condition,
where it is declared, the steps), and says whether a request takes at most one branch. status.graph
carries it (Artifacts.graph_summary) and the status poll counts each branch's traffic by it
(render/triton_metrics.py branch_traffic_status). Pure, like the rest of the compiler."""

from __future__ import annotations

import math
import re
from itertools import combinations
from typing import Any

from .plan_types import EnsemblePlan, Guard, OrchestratorPlan

# a case or default of a switch, by its declared path: `spec.pipelines[i].switch[k].cases[c]`, `....default`
_SWITCH_MEMBER = re.compile(r"^(?P<switch>.*\.switch\[\d+\])\.(cases\[\d+\]|default)$")


def branch_map(
    orchestrators: tuple[OrchestratorPlan, ...], ensembles: tuple[EnsemblePlan, ...]
) -> list[dict[str, Any]]:
    """Per pipeline with conditions (its orchestrator is named after it): each branch's ensemble, its
    condition in words (Guard.words), where it is declared, the user's steps it runs (no router), and
    `exclusive`: whether no request can take two branches (then the requests that took none are the
    pipeline's less the branches')."""
    by_name = {e.name: e for e in ensembles}
    found = []
    for o in orchestrators:
        branches = []
        for part in o.branches:
            assert part.when is not None  # a branch has its guard (compiler/branches.py)
            guard = part.when[1]
            e = by_name[part.model]
            routers = {r.name for r in e.routers}
            branches.append(
                {
                    "model": part.model,
                    "condition": guard.words(),
                    "declaredAt": guard.path,
                    "steps": [s.name for s in e.steps if s.name not in routers],
                }
            )
        guards = [(p.when[0], p.when[1]) for p in o.branches if p.when is not None]
        exclusive = all(exclusive_guards(a, b) for a, b in combinations(guards, 2))
        found.append({"pipeline": o.name, "exclusive": exclusive, "branches": branches})
    return found


def exclusive_guards(a: tuple[str, Guard], b: tuple[str, Guard]) -> bool:
    """Whether no request can satisfy both guards, each with the (resolved) reference it reads: two cases
    of one switch, or comparisons of one tensor that no value satisfies both (equal values, value sets,
    thresholds). False where it is not certain (other tensors, a switch's default against a `when`)."""
    (src_a, ga), (src_b, gb) = a, b
    if src_a != src_b:
        return False
    switch_a, switch_b = _SWITCH_MEMBER.match(ga.path), _SWITCH_MEMBER.match(gb.path)
    if switch_a and switch_b and switch_a["switch"] == switch_b["switch"]:
        return True  # a switch's first case that holds is the request's branch
    if ga.operator is None or gb.operator is None:
        return False
    return _disjoint(ga, gb)


def _values(guard: Guard) -> set[tuple[bool, object]] | None:
    """The values an `equals` or `in` takes, told apart as the orchestrator tells them (True is not 1)."""
    if guard.operator == "equals":
        return {(isinstance(guard.value, bool), guard.value)}
    if guard.operator == "in":
        assert isinstance(guard.value, tuple)
        return {(isinstance(v, bool), v) for v in guard.value}
    return None


def _interval(guard: Guard) -> tuple[float, float]:
    """The open interval a threshold holds on."""
    assert isinstance(guard.value, (int, float))
    bound = float(guard.value)
    return (bound, math.inf) if guard.operator == "greaterThan" else (-math.inf, bound)


def _outside(value: object, interval: tuple[float, float]) -> bool:
    """Whether a value is a number outside an open interval (a string or a boolean: not certain)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return not interval[0] < value < interval[1]


def _disjoint(a: Guard, b: Guard) -> bool:
    values_a, values_b = _values(a), _values(b)
    if values_a is not None and values_b is not None:
        return not values_a & values_b
    if values_a is None and values_b is None:
        (low_a, high_a), (low_b, high_b) = _interval(a), _interval(b)
        return max(low_a, low_b) >= min(high_a, high_b)
    values, threshold = (values_a, b) if values_a is not None else (values_b, a)
    assert values is not None
    interval = _interval(threshold)
    return all(_outside(v, interval) for _, v in values)
