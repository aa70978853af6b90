"""Resolve one pipeline's dataflow into a `PipelineGraph`, applying the pipeline rules as it goes.

The walk follows the document: step names and models, then pipeline inputs and outputs, the ensemble's
batch size, each step's input mapping, the pipeline outputs, and last the rules over the whole graph
(cycles, unused inputs and steps, optional inputs, decoupled origins, no sequence step after a decoupled
one). What fails a rule stays out of the graph, so later rules see only what resolved and each problem is
reported once, in the order of this walk.
"""

from __future__ import annotations

from ..spec import PipelineSpec
from . import rules
from .plan_types import (
    INPUTS,
    LATEST_VERSION,
    Consumer,
    Guard,
    PipelineGraph,
    ResolvedStep,
    Tensor,
    full_dims,
    producer,
)


def resolve_pipeline(spec: PipelineSpec, index: int) -> PipelineGraph:
    """spec.pipelines[index] resolved; `problems` on the result lists every rule it breaks."""
    g = PipelineGraph(spec, index)
    _resolve_steps(g)
    _resolve_interface(g)
    _resolve_batch_size(g)
    _catalogue(g)
    for step in g.steps.values():
        _resolve_step_inputs(g, step)
    _resolve_guards(g)
    _resolve_conditions(g)
    _resolve_outputs(g)
    order, cycle = dataflow_order(g)
    g.add(rules.acyclic(g, cycle))
    if not cycle:
        g.order = order
        g.add(rules.inputs_used(g))
        g.add(rules.optional_inputs_stay_optional(g))
        g.add(rules.steps_have_inputs(g))
        if not g.unresolved:  # unresolved references would make healthy steps look unused
            g.add(rules.steps_reach_outputs(g))
        g.add(rules.decoupled_origins_agree(g))
        g.add(rules.sequence_steps_before_decoupled(g))
        g.add(rules.steps_before_a_sequence_keep_order(g))
        if g.conditional:
            g.add(rules.branches_meet_at_outputs(g))
            g.add(rules.conditions_with_state(g))
        g.add(rules.speculation_stateless(g))
        g.add(rules.merges_fit(g))
    return g


def _resolve_steps(g: PipelineGraph) -> None:
    for j, step in enumerate(g.pipeline.steps):
        if g.add(rules.step_name_free(g, j), unresolved=True):
            continue
        if g.add(rules.step_model_known(g, j), unresolved=True):
            continue
        g.add(rules.step_version_served(g, j))
        version = LATEST_VERSION if step.version is None else step.version
        g.steps[step.step_name] = ResolvedStep(step.step_name, j, g.models[step.model], step.inputs, version)
    g.deps = {name: set() for name in g.steps}


def _resolve_interface(g: PipelineGraph) -> None:
    """The pipeline's input names (first of duplicates kept), then its output names."""
    g.add(rules.unique_input_names(g), unresolved=True)
    for j, i in enumerate(g.pipeline.inputs):
        g.inputs.setdefault(i.name, j)
    g.add(rules.unique_output_names(g))


def _resolve_batch_size(g: PipelineGraph) -> None:
    """The ensemble's maxBatchSize: as set, or the smallest of its batching steps (Triton exempts steps
    with maxBatchSize 0; their dims are full shapes and are checked as such)."""
    declared = g.pipeline.max_batch_size
    batching = [s.model.max_batch_size for s in g.steps.values() if s.model.max_batch_size > 0]
    g.max_batch_size = min(batching, default=0) if declared is None else declared
    g.add(rules.ensemble_batch_size_fits(g))


def _catalogue(g: PipelineGraph) -> None:
    """Every tensor a reference may name: the pipeline inputs and the outputs of resolved steps."""
    for i in g.pipeline.inputs:
        g.catalogue[f"{INPUTS}.{i.name}"] = Tensor(i.data_type, full_dims(i.dims, g.batching), i.optional)
    for step in g.steps.values():
        model = step.model
        for out in model.outputs:
            g.catalogue[f"{step.name}.{out.name}"] = Tensor(
                out.data_type, full_dims(out.dims, model.max_batch_size > 0)
            )


def _source(g: PipelineGraph, ref: str, path: str) -> str | None:
    """`ref` when it names a tensor of the catalogue; otherwise None (reported here or with its step)."""
    if g.add(rules.reference_resolves(g, ref, path), unresolved=True):
        return None
    head = producer(ref)
    if head != INPUTS and head not in g.steps:
        g.unresolved = True  # the step it names is refused (and reported) itself
        return None
    return ref


def _resolve_step_inputs(g: PipelineGraph, step: ResolvedStep) -> None:
    for key, ref in step.inputs.items():
        if g.add(rules.maps_a_model_input(g, step, key), unresolved=True):
            continue
        src = _source(g, ref, f"{g.step_path(step.index)}.inputs.{key}")
        if src is None:
            continue
        if producer(src) != INPUTS:
            g.deps[step.name].add(producer(src))
        g.consumers.setdefault(src, []).append(Consumer(step.name, key))
        if not g.add(rules.data_types_agree(g, step, key, src)):
            g.add(rules.shapes_agree(g, step, key, src))
    g.add(rules.required_inputs_mapped(g, step), unresolved=True)


def _resolve_guards(g: PipelineGraph) -> None:
    """When each step runs: its `when`, or the case of a switch that names it (a step in one branch)."""
    for step in g.steps.values():
        when = g.pipeline.steps[step.index].when
        if when is not None:
            g.guards[step.name] = Guard.of(when.tensor, when.operator, path=f"{g.step_path(step.index)}.when")
    for k, switch in enumerate(g.pipeline.switch):
        path = f"{g.path}.switch[{k}]"
        earlier: list[tuple[str, object]] = []
        for c, case in enumerate(switch.cases):
            guard = Guard.of(switch.tensor, case.operator, tuple(earlier), f"{path}.cases[{c}]")
            earlier.append(guard.operator_value)
            _guard_steps(g, case.steps, guard, f"{path}.cases[{c}].steps")
        default = Guard(switch.tensor, None, None, tuple(earlier), f"{path}.default")
        _guard_steps(g, switch.default, default, f"{path}.default")


def _guard_steps(g: PipelineGraph, names: list[str], guard: Guard, path: str) -> None:
    for i, name in enumerate(names):
        if not g.add(rules.switch_names_a_step(g, name, guard, f"{path}[{i}]")) and name in g.steps:
            g.guards[name] = guard


def _resolve_conditions(g: PipelineGraph) -> None:
    """Each condition (a `when`, a switch): its tensor resolves, runs before the steps it guards (a
    dependency) and fits each comparison."""
    for step in g.steps.values():
        when = g.pipeline.steps[step.index].when
        if when is None:
            continue
        src = _source(g, when.tensor, f"{g.step_path(step.index)}.when.tensor")
        if src is not None:
            _depend(g, [step.name], src)
            comparisons = [(f"{g.step_path(step.index)}.when", *when.operator)]
            g.add(rules.condition_fits(g, f"{g.step_path(step.index)}.when", src, comparisons))
    for k, switch in enumerate(g.pipeline.switch):
        path = f"{g.path}.switch[{k}]"
        src = _source(g, switch.tensor, f"{path}.tensor")
        if src is not None:
            guarded = [name for name, guard in g.guards.items() if guard.path.startswith(f"{path}.")]
            _depend(g, guarded, src)
            comparisons = [(f"{path}.cases[{c}]", *case.operator) for c, case in enumerate(switch.cases)]
            g.add(rules.condition_fits(g, path, src, comparisons))


def _depend(g: PipelineGraph, steps: list[str], src: str) -> None:
    for name in steps:
        if producer(src) != INPUTS and producer(src) != name:
            g.deps[name].add(producer(src))
        g.conditions[name] = src


def _resolve_outputs(g: PipelineGraph) -> None:
    for j, o in enumerate(g.pipeline.outputs):
        if g.add(rules.output_from_a_step(g, j)):
            continue
        src = _source(g, o.source, f"{g.path}.outputs[{j}].from")
        if src is None:
            continue
        g.outputs[o.name] = src
        g.consumers.setdefault(src, []).append(Consumer(None, o.name))
        g.add(rules.shared_tensor_named_once(g, j, src))
        sources = [src]
        for k, ref in enumerate(o.or_from):
            other = _source(g, ref, f"{g.path}.outputs[{j}].orFrom[{k}]")
            if other is not None:
                sources.append(other)
                g.consumers.setdefault(other, []).append(Consumer(None, o.name))
        g.merges[o.name] = sources


def dataflow_order(g: PipelineGraph) -> tuple[list[str], list[str]]:
    """(steps in topological order, []) or (partial order, the first cycle met, its first member
    repeated at the end).

    Iterative depth-first post-order: dependencies in declaration order, roots in declaration order.
    No recursion, so a chain of any length (declared in any order) cannot hit Python's recursion
    limit."""
    order: list[str] = []
    done: set[str] = set()

    def rank(name: str) -> int:
        return g.steps[name].index

    for root in g.steps:  # declaration order
        if root in done:
            continue
        path: list[str] = [root]  # the current chain of steps being expanded
        on_path: dict[str, int] = {root: 0}  # step -> its position in path
        pending = [iter(sorted(g.deps[root], key=rank))]
        while pending:
            for dep in pending[-1]:
                if dep in on_path:
                    return order, [*path[on_path[dep] :], dep]
                if dep not in done:
                    on_path[dep] = len(path)
                    path.append(dep)
                    pending.append(iter(sorted(g.deps[dep], key=rank)))
                    break
            else:  # every dependency of path[-1] is placed: place it
                node = path.pop()
                del on_path[node]
                pending.pop()
                done.add(node)
                order.append(node)
    return order, []
