"""Plan a pipeline with conditions (`when:`): its unconditional steps (the head) and each branch (the
steps sharing one condition) become plain ensembles, planned as any pipeline is, and an orchestrator
named after the pipeline calls them (compiler/orchestrator_model.py).

Each part is planned from a pipeline of its own, derived from the spec's: its inputs are the tensors it
reads from outside (named by their reference, `inputs.NAME` or `STEP.TENSOR`), its outputs the tensors
others read from it (named by reference too), so the orchestrator passes tensors between the parts by
their references. Pure, like the rest of the compiler.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

from ..spec import Pipeline
from .plan_types import (
    INPUTS,
    EnsemblePlan,
    Guard,
    MergedOutput,
    OrchestratorPlan,
    PartPlan,
    PipelineGraph,
    producer,
)
from .resolve import resolve_pipeline

HEAD = "head"  # the part name of the unconditional steps: PIPELINE__head
BRANCH = "when"  # a branch's part name: PIPELINE__when<k>
SWITCH = "switch"  # the native switch's name: PIPELINE__switch (compiler/switch_plan.py)
MAX_PART_NAME = 100


def part_name(pipeline: str, part: str, taken: set[str]) -> str:
    """`PIPELINE__PART`, hashed when it clashes with a declared or generated name."""
    base = f"{pipeline}__{part}"
    if base not in taken and len(base) <= MAX_PART_NAME:
        return base
    digest = hashlib.sha256(f"{pipeline}\0{part}".encode()).hexdigest()[:10]
    return f"{base[: MAX_PART_NAME - 12]}_{digest}"


def plan_conditional(
    g: PipelineGraph, taken: set[str], *, cpu_only: bool
) -> tuple[list[EnsemblePlan], OrchestratorPlan]:
    """The parts' ensembles and the orchestrator of a conditional pipeline that broke no rule. Names it
    picks are added to `taken`."""
    from .plan import ensemble_output, keeps_batch_dimension, plan_ensemble

    order = g.order or []
    head = [s for s in order if g.when(s) is None]
    groups: dict[Guard, list[str]] = {}  # equal guards, one branch
    for s in order:
        when = g.when(s)
        if when is not None:
            groups.setdefault(when, []).append(s)
    read_by: dict[str, set[str]] = {}  # reference -> the parts reading it ("" the orchestrator)
    parts = {**{s: HEAD for s in head}, **{s: k for k, ss in enumerate(groups.values()) for s in ss}}
    for s in order:
        for ref in g.steps[s].inputs.values():
            read_by.setdefault(ref, set()).add(str(parts[s]))
    for ref in g.conditions.values():
        read_by.setdefault(ref, set()).add("")
    for sources in g.merges.values():
        for ref in sources:
            read_by.setdefault(ref, set()).add("")

    def io(members: list[str], part: str) -> tuple[list[str], list[str]]:
        inside = set(members)
        reads = sorted(
            {ref for s in members for ref in g.steps[s].inputs.values() if producer(ref) not in inside}
        )
        written = sorted(
            ref for ref, parts_ in read_by.items() if producer(ref) in inside and parts_ - {part}
        )
        return reads, written

    ensembles: list[EnsemblePlan] = []

    def plan_part(members: list[str], part: str, label: str) -> PartPlan:
        reads, written = io(members, part)
        name = part_name(g.pipeline.name, label, taken | set(g.steps))
        taken.add(name)
        sub = _part_pipeline(g, name, members, reads, written)
        sg = resolve_pipeline(g.spec.model_copy(update={"pipelines": [sub]}), 0)
        # a pipeline that broke no rule gives parts that break none: a problem here is the compiler's own
        assert not sg.problems, f"{g.path}: the generated part {name} breaks a rule: {sg.problems}"
        planned = plan_ensemble(sg, taken, cpu_only=cpu_only)
        # its routers serve the user's pipeline (status.graph, render's report)
        routers = tuple(replace(r, pipeline=g.pipeline.name) for r in planned.routers)
        ensembles.append(replace(planned, routers=routers))
        models = [g.steps[s].model for s in members]
        return PartPlan(
            model=name,
            inputs=tuple(reads),
            outputs=tuple(written),
            streams=any(m.decoupled for m in models),
            sequence=any(m.sequence_batching is not None for m in models),
        )

    head_plan = plan_part(head, HEAD, HEAD) if head else None
    branches = []
    for k, (guard, members) in enumerate(groups.items()):
        part = plan_part(members, str(k), f"{BRANCH}{k}")
        branches.append(replace(part, when=(g.conditions[members[0]], guard)))
    switch = part_name(g.pipeline.name, SWITCH, taken | set(g.steps))
    taken.add(switch)
    batching = keeps_batch_dimension(g)
    p = g.pipeline
    orchestrator = OrchestratorPlan(
        name=p.name,
        max_batch_size=g.max_batch_size if batching else 0,
        inputs=tuple(
            (i.name, ensemble_output(g.catalogue[f"{INPUTS}.{i.name}"], batching)) for i in p.inputs
        ),
        outputs=tuple(
            MergedOutput(
                name=o.name,
                sources=tuple(g.merges[o.name]),
                tensor=ensemble_output(g.catalogue[g.outputs[o.name]], batching),
                default=o.default,
                fill_dims=g.per_request(g.outputs[o.name]),
                fill_rows=g.owner_batches(g.outputs[o.name]),
            )
            for o in p.outputs
        ),
        head=head_plan,
        branches=tuple(branches),
        decoupled=any(b.streams for b in branches),
        sequence_idle_us=max(
            (
                s.model.sequence_batching.max_sequence_idle_microseconds
                for s in g.steps.values()
                if s.model.sequence_batching is not None
            ),
            default=0,
        ),
        switch=switch,
        speculative=p.speculative,
    )
    return ensembles, orchestrator


def _part_pipeline(
    g: PipelineGraph, name: str, members: list[str], reads: list[str], written: list[str]
) -> Pipeline:
    """The pipeline of one part: the tensors it reads from outside as its inputs, those it writes for
    others as its outputs, every name a reference."""
    inputs: list[dict[str, Any]] = []
    for ref in reads:
        t = g.catalogue[ref]
        dims = t.full_dims[1:] if g.batching and g.owner_batches(ref) else t.full_dims
        inputs.append({"name": ref, "dataType": t.data_type, "dims": list(dims), "optional": t.optional})
    steps = []
    for s in members:
        step = g.pipeline.steps[g.steps[s].index]
        mapped = {
            k: f"{INPUTS}.{ref}" if producer(ref) not in members else ref for k, ref in step.inputs.items()
        }
        entry: dict[str, Any] = {"name": s, "model": step.model, "inputs": mapped}
        if step.version is not None:
            entry["version"] = step.version
        steps.append(entry)
    return Pipeline.model_validate(
        {
            "name": name,
            "inputs": inputs,
            "steps": steps,
            "outputs": [{"name": ref, "from": ref} for ref in written],
            "fanOut": g.pipeline.fan_out,
            "maxBatchSize": g.max_batch_size,
        }
    )


def plan_json(plan: OrchestratorPlan) -> str:
    """What the orchestrator model reads from its config's `tritonpipeline.plan` parameter."""

    def part(p: PartPlan | None) -> dict[str, Any] | None:
        if p is None:
            return None
        entry: dict[str, Any] = {"model": p.model, "inputs": list(p.inputs), "outputs": list(p.outputs)}
        if p.when is not None:
            entry["when"] = p.when[1].plan(p.when[0])
        entry.update({key: True for key, on in (("streams", p.streams), ("sequence", p.sequence)) if on})
        return entry

    return json.dumps(
        {
            "batching": plan.max_batch_size > 0,
            "inputs": {f"{INPUTS}.{name}": name for name, _ in plan.inputs},
            "head": part(plan.head),
            "branches": [part(b) for b in plan.branches],
            "outputs": [
                {
                    "name": o.name,
                    "sources": list(o.sources),
                    "default": o.default,
                    "dataType": o.tensor.data_type,
                    "dims": list(o.fill_dims),
                    "rows": o.fill_rows,
                }
                for o in plan.outputs
            ],
        },
        sort_keys=True,
    )
