"""Which autoscaling engine scales a pipeline: the spec's `hpa` or `keda`, or for `auto` (the default)
KEDA where the cluster serves its ScaledObject, the HPA on prometheus-adapter's metrics where not
(render/autoscaling_objects.py `choose`). Read from API discovery (runtime/discovery.py: kept for the
discovery period, read again when a CRD appears); the admission webhook and `validate` ask no cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..render import autoscaling_objects
from ..render.manifests import Children, with_engine
from ..runtime.state import OperatorState
from ..spec import TritonPipeline
from . import authors

APPLY_VERBS = ("create", "patch")  # what the server-side apply of a new ScaledObject, then of a change, needs


async def choose_engine(
    state: OperatorState, body: Mapping[str, Any], tp: TritonPipeline, children: Children
) -> tuple[Children, autoscaling_objects.EngineChoice]:
    """The children with the autoscaler of the engine chosen for the pipeline (`chosen`), and that
    choice, with what then scales the pipeline."""
    choice = await chosen(state, body, tp, children.keda_alternative)
    scaling = autoscaling_objects.describe(tp, choice.engine)
    return with_engine(children, choice.engine), replace(choice, scaling=scaling)


async def chosen(
    state: OperatorState, body: Mapping[str, Any], tp: TritonPipeline, keda: dict[str, Any] | None
) -> autoscaling_objects.EngineChoice:
    """The engine of the pipeline and why. `auto` gets KEDA only where the cluster serves it, the operator
    may use it (settings.use_keda) and the pipeline's ScaledObject (`keda`: Children.keda_alternative)
    passes the access review (its author may create one, or an admin list allows it: render/reach.py) and
    the operator's own RBAC lets it apply ScaledObjects in the namespace (a SelfSubjectAccessReview per
    verb, kept for the discovery period); the HPA otherwise, and the choice says why."""
    served, usable = False, state.settings.use_keda
    problems: list[str] = []
    denied: list[str] = []
    if keda is not None:  # else the spec names its engine (or has none): nothing to ask the cluster
        key = (tp.metadata.namespace or "default", tp.name)
        api, kind = autoscaling_objects.SCALED_OBJECT_API
        served = await state.discovery.served(state.kube, api, kind, key)
        if served and usable:
            for verb in APPLY_VERBS:  # an answer of None (the operator may not ask): tried, as before
                if await state.discovery.may(state.kube, verb, api, kind, key[0]) is False:
                    denied.append(verb)
        if served and usable and not denied:
            problems = [str(p) for p in await authors.unreviewed(state, body, tp, [keda])]
    return autoscaling_objects.choose(tp, served, usable, problems, denied)
