"""Former home of the compiler's graph code, now split into `plan_types` (the data), `rules` (one
function per rule), `resolve` (one pipeline's dataflow) and `plan` (ensembles and routers). These
re-exports keep imports from branches written against the old layout working while they move."""

from __future__ import annotations

from .plan import MAX_ROUTER_NAME, ensemble_output, plan_repository, router_name
from .plan_types import (
    INPUTS,
    ROUTER_INPUT,
    Consumer,
    EnsemblePlan,
    RepositoryPlan,
    RouterPlan,
    StepPlan,
    Tensor,
    full_dims,
)
from .rules import DECOUPLED_ORIGINS, decoupled_conflicts, dims_compatible

__all__ = [
    "DECOUPLED_ORIGINS",
    "INPUTS",
    "MAX_ROUTER_NAME",
    "ROUTER_INPUT",
    "Consumer",
    "EnsemblePlan",
    "RepositoryPlan",
    "RouterPlan",
    "StepPlan",
    "Tensor",
    "decoupled_conflicts",
    "dims_compatible",
    "ensemble_output",
    "full_dims",
    "plan_repository",
    "router_name",
]
