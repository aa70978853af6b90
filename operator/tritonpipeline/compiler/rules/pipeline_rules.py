"""The rules of one pipeline, over the `PipelineGraph` that `resolve.resolve_pipeline` builds (which
decides what each rule is applied to and in what order): names in the pipeline, its dataflow, and
what decoupled and sequence steps need."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet

from ...errors import Problem
from ...spec import Model
from ..plan_types import (
    INPUTS,
    Guard,
    PipelineGraph,
    ResolvedStep,
    Tensor,
    first_index,
    full_dims,
    is_input_ref,
    parse_ref,
    producer,
)
from .messages import (
    BAD_REFERENCE,
    BRANCH_READ_ACROSS,
    CONDITION_AFTER_DECOUPLED,
    CONDITION_FROM_BRANCH,
    CONDITION_NOT_SCALAR,
    CONDITION_SEQUENCE_AND_DECOUPLED,
    CONDITION_TYPE,
    CONDITION_VALUE,
    CONTROL_MAPPED,
    CONTROL_WITHOUT_SEQUENCE_BATCHING,
    CYCLE,
    DATA_TYPE_MISMATCH,
    DEAD_STEP,
    DECOUPLED_ORIGINS,
    DEFAULT_BF16,
    DEFAULT_DIMS,
    DEFAULT_UNCONDITIONAL,
    DEFAULT_VALUE,
    DUPLICATE_INPUT,
    DUPLICATE_OUTPUT,
    DUPLICATE_OUTPUT_OTHER,
    DUPLICATE_OUTPUT_SAME,
    DUPLICATE_STEP,
    ENSEMBLE_BATCH_ABOVE_STEPS,
    INPUT_RANK_HINT,
    KEEP_ORDER_WITH_BATCHER,
    KEEP_ORDER_WITH_ONE_INSTANCE,
    MERGE_MISMATCH,
    MERGE_NEVER_READ,
    MERGE_WITHOUT_CONDITIONS,
    OPTIONAL_INPUT_TO_REQUIRED,
    OUTPUT_FROM_INPUT,
    OUTPUT_NAMED_LIKE_INPUT,
    REQUIRED_INPUT_UNMAPPED,
    RESERVED_STEP_NAME,
    SEQUENCE_AFTER_DECOUPLED,
    SEQUENCE_CONTROL_NAMES,
    SHAPE_MISMATCH,
    SHARED_TENSOR_NAMED_TWICE,
    SPECULATIVE_DECOUPLED,
    SPECULATIVE_SEQUENCE,
    SPECULATIVE_WITH_STATE,
    SPECULATIVE_WITHOUT_CONDITIONS,
    STATE_MAPPED,
    STEP_NAME_NEEDED,
    STEP_VERSION_NOT_SERVED,
    STEP_WITHOUT_INPUTS,
    SWITCH_STEP_GUARDED_TWICE,
    SWITCH_UNKNOWN_STEP,
    UNDECLARED_TENSORS,
    UNKNOWN_INPUT,
    UNKNOWN_MODEL,
    UNKNOWN_MODEL_INPUT,
    UNKNOWN_OUTPUT,
    UNKNOWN_STEP,
    UNORDERED_BEFORE_SEQUENCE,
    UNUSED_INPUT,
    _fmt_dims,
    dims_compatible,
    same_type,
)
from .model_rules import _backend

# --------------------------------------------------------------------------- names in a pipeline


def step_name_free(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """One producer per tensor: step names are unique, and `inputs` names the pipeline inputs."""
    step = g.pipeline.steps[j]
    name = step.step_name
    path = f"{g.step_path(j)}.name" if step.name else f"{g.step_path(j)}.model"
    if not step.name and "." in step.model:
        message = STEP_NAME_NEEDED.format(model=step.model, suggestion=step.model.replace(".", "_"))
        yield Problem(f"{g.step_path(j)}.name", message)
    elif name == INPUTS:
        yield Problem(path, RESERVED_STEP_NAME.format(name=INPUTS))
    elif g.first_step[name] != j:
        yield Problem(path, DUPLICATE_STEP.format(name=name, first=g.step_path(g.first_step[name])))


def step_model_known(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """Every step runs a declared model."""
    step = g.pipeline.steps[j]
    if step.model not in g.models:
        known = ", ".join(sorted(m.name for m in g.spec.models))
        yield Problem(f"{g.step_path(j)}.model", UNKNOWN_MODEL.format(model=step.model, known=known))


def step_version_served(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """A step that calls a version calls one its model's versionPolicy serves, where the spec says which
    (`specific`; which versions `latest` and `all` serve depends on the model's files)."""
    step = g.pipeline.steps[j]
    policy = g.models[step.model].version_policy
    if step.version is None or policy is None or policy.policy != "specific":
        return
    if step.version not in policy.versions:
        versions = ", ".join(str(v) for v in policy.versions)
        message = STEP_VERSION_NOT_SERVED.format(
            model=step.model, versions=versions, pipeline=g.pipeline.name, version=step.version
        )
        yield Problem(f"{g.step_path(j)}.version", message)


def unique_input_names(g: PipelineGraph) -> Iterator[Problem]:
    """Pipeline input names are unique."""
    first = first_index(i.name for i in g.pipeline.inputs)
    for j, i in enumerate(g.pipeline.inputs):
        if first[i.name] != j:
            yield Problem(f"{g.path}.inputs[{j}].name", DUPLICATE_INPUT.format(name=i.name))


def unique_output_names(g: PipelineGraph) -> Iterator[Problem]:
    """One producer per tensor: pipeline output names are unique and differ from the input names."""
    first = first_index(o.name for o in g.pipeline.outputs)
    for j, o in enumerate(g.pipeline.outputs):
        if first[o.name] != j:
            earlier = g.pipeline.outputs[first[o.name]].source
            detail = (
                DUPLICATE_OUTPUT_SAME.format(src=o.source)
                if earlier == o.source
                else DUPLICATE_OUTPUT_OTHER.format(src=earlier, other=o.source)
            )
            yield Problem(
                f"{g.path}.outputs[{j}].name",
                DUPLICATE_OUTPUT.format(name=o.name, first=first[o.name], detail=detail),
            )
        elif o.name in g.inputs:
            yield Problem(f"{g.path}.outputs[{j}].name", OUTPUT_NAMED_LIKE_INPUT.format(name=o.name))


def ensemble_batch_size_fits(g: PipelineGraph) -> Iterator[Problem]:
    """An ensemble's maxBatchSize is <= every batching step's (steps with maxBatchSize 0 are exempt)."""
    size = g.pipeline.max_batch_size
    if size is None:
        return
    limiting = sorted(
        (s for s in g.steps.values() if 0 < s.model.max_batch_size < size), key=lambda s: s.name
    )
    if limiting:
        steps = ", ".join(f"{s.name} ({s.model.name}: {s.model.max_batch_size})" for s in limiting)
        yield Problem(f"{g.path}.maxBatchSize", ENSEMBLE_BATCH_ABOVE_STEPS.format(size=size, steps=steps))


# --------------------------------------------------------------------------- dataflow


def maps_a_model_input(g: PipelineGraph, step: ResolvedStep, key: str) -> Iterator[Problem]:
    """A step maps only its model's declared inputs, and never what Triton fills (sequence controls,
    implicit states)."""
    model = step.model
    sb = model.sequence_batching
    path = f"{g.step_path(step.index)}.inputs.{key}"
    if sb is not None and key in sb.controls.names():
        yield Problem(path, CONTROL_MAPPED.format(name=key, model=model.name))
    elif sb is not None and key in {s.input_name for s in sb.states}:
        yield Problem(path, STATE_MAPPED.format(name=key, model=model.name))
    elif not model.inputs:
        yield Problem(path, UNDECLARED_TENSORS.format(model=model.name, kind="inputs", name=key))
    elif key not in {t.name for t in model.inputs}:
        hint = (
            CONTROL_WITHOUT_SEQUENCE_BATCHING if key.upper() in SEQUENCE_CONTROL_NAMES and sb is None else ""
        )
        known = ", ".join(dict.fromkeys(t.name for t in model.inputs))
        yield Problem(path, UNKNOWN_MODEL_INPUT.format(model=model.name, name=key, known=known, hint=hint))


def reference_resolves(g: PipelineGraph, ref: str, path: str) -> Iterator[Problem]:
    """Every reference names a pipeline input or an output of a step. A reference to a step that is
    itself refused (unknown model, duplicate name) is not reported again."""
    parsed = parse_ref(ref) if isinstance(ref, str) else None
    if parsed is None:
        yield Problem(path, BAD_REFERENCE.format(ref=ref))
        return
    head, tail = parsed
    if any(ref.startswith(f"{name}.") for name in g.first_step if "." in name):
        return  # a step named after a dotted model: refused at its name (step_name_free)
    if head == INPUTS:
        if tail not in g.inputs:
            known = ", ".join(i.name for i in g.pipeline.inputs) or "none"
            yield Problem(path, UNKNOWN_INPUT.format(name=tail, known=known))
    elif head not in g.first_step:
        yield Problem(path, UNKNOWN_STEP.format(name=head, known=", ".join(g.first_step)))
    elif head in g.steps:
        model = g.steps[head].model
        if not model.outputs:
            yield Problem(path, UNDECLARED_TENSORS.format(model=model.name, kind="outputs", name=tail))
        elif tail not in {o.name for o in model.outputs}:
            known = ", ".join(o.name for o in model.outputs)
            yield Problem(path, UNKNOWN_OUTPUT.format(step=head, model=model.name, name=tail, known=known))


def _wanted(step: ResolvedStep, key: str) -> Tensor:
    """What a step's model input `key` accepts, batch dimension included."""
    declared = {t.name: t for t in step.model.inputs}[key]  # duplicates: unique_tensor_names
    return Tensor(declared.data_type, full_dims(declared.dims, step.model.max_batch_size > 0))


def data_types_agree(g: PipelineGraph, step: ResolvedStep, key: str, src: str) -> Iterator[Problem]:
    """Producer and consumer agree on the data type (BYTES and STRING are one type)."""
    have, want = g.catalogue[src], _wanted(step, key)
    if not same_type(have.data_type, want.data_type):
        yield Problem(
            f"{g.step_path(step.index)}.inputs.{key}",
            DATA_TYPE_MISMATCH.format(
                src=src, have=have.data_type, name=key, model=step.model.name, want=want.data_type
            ),
        )


def shapes_agree(g: PipelineGraph, step: ResolvedStep, key: str, src: str) -> Iterator[Problem]:
    """Producer and consumer agree on the full shape: same rank, each dimension equal or -1."""
    have, want = g.catalogue[src], _wanted(step, key)
    if not dims_compatible(have.full_dims, want.full_dims):
        message = SHAPE_MISMATCH.format(
            src=src,
            have=_fmt_dims(have.full_dims),
            name=key,
            model=step.model.name,
            want=_fmt_dims(want.full_dims),
        )
        if is_input_ref(src) and len(have.full_dims) != len(want.full_dims):
            message += INPUT_RANK_HINT
        yield Problem(f"{g.step_path(step.index)}.inputs.{key}", message)


def required_inputs_mapped(g: PipelineGraph, step: ResolvedStep) -> Iterator[Problem]:
    """Every required model input is mapped (a control or state listed under inputs is reported once,
    by `filled_tensors_not_inputs`)."""
    sb = step.model.sequence_batching
    filled = {*sb.controls.names(), *(s.input_name for s in sb.states)} if sb else set()
    for t in step.model.inputs:
        if t.name not in step.inputs and not t.optional and t.name not in filled:
            yield Problem(
                f"{g.step_path(step.index)}.inputs",
                REQUIRED_INPUT_UNMAPPED.format(name=t.name, model=step.model.name),
            )


def output_from_a_step(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """A pipeline output comes from a step (an ensemble cannot pass an input straight through)."""
    parsed = parse_ref(g.pipeline.outputs[j].source)
    if parsed is not None and parsed[0] == INPUTS:
        yield Problem(f"{g.path}.outputs[{j}].from", OUTPUT_FROM_INPUT)


def shared_tensor_named_once(g: PipelineGraph, j: int, src: str) -> Iterator[Problem]:
    """Under fanOut: shared a tensor has one name, so it can be exposed as one pipeline output only."""
    if g.pipeline.fan_out != "shared":
        return
    named = [c.name for c in g.consumers[src] if c.step is None]
    if len(named) > 1:
        yield Problem(
            f"{g.path}.outputs[{j}].from", SHARED_TENSOR_NAMED_TWICE.format(src=src, names=", ".join(named))
        )


def acyclic(g: PipelineGraph, cycle: Sequence[str]) -> Iterator[Problem]:
    """No cycles: `cycle` is the one the dataflow order ran into (first member repeated at the end)."""
    if cycle:
        yield Problem(
            f"{g.step_path(g.steps[cycle[-1]].index)}.inputs",
            CYCLE.format(pipeline=g.pipeline.name, members=" -> ".join(cycle)),
        )


def inputs_used(g: PipelineGraph) -> Iterator[Problem]:
    """Every pipeline input is used. An input named by a mapping that failed for another reason, or any
    misspelt `inputs.X`, would make this finding noise, so then it is skipped."""
    referenced = {v for st in g.pipeline.steps for v in st.inputs.values() if isinstance(v, str)}
    referenced |= {st.when.tensor for st in g.pipeline.steps if st.when is not None}
    referenced |= {switch.tensor for switch in g.pipeline.switch}
    if any(is_input_ref(r) and r.split(".", 1)[1] not in g.inputs for r in referenced):
        return
    for name, j in g.inputs.items():
        ref = f"{INPUTS}.{name}"
        if ref not in referenced and not g.consumers.get(ref):
            yield Problem(f"{g.path}.inputs[{j}]", UNUSED_INPUT.format(name=name))


def optional_inputs_stay_optional(g: PipelineGraph) -> Iterator[Problem]:
    """An optional pipeline input feeds only optional model inputs (directly or through its router)."""
    for i in g.pipeline.inputs:
        if not i.optional or g.inputs.get(i.name) is None:
            continue
        for c in g.consumers.get(f"{INPUTS}.{i.name}", []):
            step = g.steps[c.step] if c.step else None
            wanted = next((t for t in step.model.inputs if t.name == c.name), None) if step else None
            if step is not None and wanted is not None and not wanted.optional:
                yield Problem(
                    f"{g.step_path(step.index)}.inputs.{c.name}",
                    OPTIONAL_INPUT_TO_REQUIRED.format(name=i.name, consumer=c.label, model=step.model.name),
                )


def steps_have_inputs(g: PipelineGraph) -> Iterator[Problem]:
    """Every step reads something (Triton never runs a step without inputs)."""
    for step in g.steps.values():
        if not step.inputs:
            yield Problem(f"{g.step_path(step.index)}.inputs", STEP_WITHOUT_INPUTS.format(name=step.name))


def steps_reach_outputs(g: PipelineGraph) -> Iterator[Problem]:
    """Every step feeds some pipeline output, directly or through other steps (Triton refuses a step
    without output_map)."""
    useful: set[str] = set()
    frontier = [producer(src) for src, cs in g.consumers.items() if any(c.step is None for c in cs)]
    while frontier:
        s = frontier.pop()
        if s in useful or s == INPUTS:
            continue
        useful.add(s)
        frontier.extend(g.deps.get(s, ()))
    for step in g.steps.values():
        if step.name not in useful:
            yield Problem(g.step_path(step.index), DEAD_STEP.format(name=step.name))


def decoupled_conflicts(
    order: Sequence[str],
    inputs_of: Mapping[str, Sequence[str]],
    decoupled: AbstractSet[str],
    outputs: Sequence[tuple[str, str]],
) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Triton's decoupled-origin rule, exactly: every tensor carries the origin of its responses, the
    nearest decoupled step upstream (None for pipeline inputs and for tensors with no decoupled step
    upstream). A decoupled step's outputs originate from that step; any other step's outputs inherit
    the one origin its inputs share. The inputs of every step, and the pipeline outputs as a whole
    (Triton checks them as one more "step"), must share one origin.

    order: steps in topological order; inputs_of: step -> the references it reads; outputs: (where,
    reference) pairs. References are `inputs.NAME` or `STEP.TENSOR`; unresolved ones are skipped.
    Returns (step name, or the `where` of the first output that differs; [(reference, origin)]) per
    violation. A step in conflict taints its outputs, so one conflict is reported once."""
    origin: dict[str, str | None] = {}  # step -> origin of its outputs
    tainted: set[str] = set()
    conflicts: list[tuple[str, list[tuple[str, str | None]]]] = []

    def sources(refs: Sequence[str]) -> list[tuple[str, str | None]] | None:
        found: list[tuple[str, str | None]] = []
        for ref in refs:
            head = producer(ref)
            if head in tainted:
                return None
            if head == INPUTS:
                found.append((ref, None))
            elif head in origin:
                found.append((ref, origin[head]))
        return found

    for name in order:
        found = sources(inputs_of.get(name, ()))
        if found is None:
            tainted.add(name)
            continue
        if len({o for _, o in found}) > 1:
            conflicts.append((name, found))
            tainted.add(name)
            continue
        origin[name] = name if name in decoupled else (found[0][1] if found else None)
    found = sources([ref for _, ref in outputs])
    if found and len({o for _, o in found}) > 1:
        first = next(i for i, (_, o) in enumerate(found) if o != found[0][1])
        where = next(w for w, ref in outputs if ref == found[first][0])
        conflicts.append((where, found))
    return conflicts


def _outputs_by_part(g: PipelineGraph) -> list[tuple[Guard | None, list[tuple[str, str]]]]:
    """The (where, reference) pairs Triton checks as one ensemble's outputs: the pipeline's outputs; in a
    pipeline with conditions, per part (the steps without `when`, each branch: its guard), the sources of
    outputs its steps write, each once (the orchestrator joins the parts' outputs itself, and each part
    is an ensemble of its own)."""
    if not g.conditional:
        return [(None, [(f"{g.path}.outputs[{j}].from", o.source) for j, o in enumerate(g.pipeline.outputs)])]
    parts: dict[Guard | None, dict[str, str]] = {}
    for j, o in enumerate(g.pipeline.outputs):
        for k, ref in enumerate(g.merges.get(o.name, ())):
            where = f"{g.path}.outputs[{j}]." + ("from" if k == 0 else f"orFrom[{k - 1}]")
            parts.setdefault(_branch(g, ref), {}).setdefault(ref, where)
    return [(guard, [(w, ref) for ref, w in refs.items()]) for guard, refs in parts.items()] or [(None, [])]


def decoupled_origins_agree(g: PipelineGraph) -> Iterator[Problem]:
    """No re-join of tensors from different decoupled steps (see `decoupled_conflicts`), per step and
    for the pipeline outputs (per part where it has conditions). Needs the dataflow order."""
    order = g.order or []
    inputs_of = {name: [ref for _, ref in sorted(g.steps[name].inputs.items())] for name in order}
    decoupled = {s.name for s in g.steps.values() if s.model.decoupled}
    for k, (guard, outputs) in enumerate(_outputs_by_part(g)):
        for where, sources in decoupled_conflicts(order, inputs_of, decoupled, outputs):
            if where in g.steps and k > 0:
                continue  # each step's once
            detail = "; ".join(
                f"{ref} comes from decoupled step {origin!r}" if origin else f"{ref} from no decoupled step"
                for ref, origin in sources
            )
            if where in g.steps:
                what, path = f"step {where!r}", f"{g.step_path(g.steps[where].index)}.inputs"
            elif guard is not None:
                what, path = (
                    f"pipeline {g.pipeline.name!r} (the outputs its steps that run {guard.said()} write)",
                    where,
                )
            else:
                what, path = f"pipeline {g.pipeline.name!r} (its outputs)", where
            yield Problem(path, DECOUPLED_ORIGINS.format(what=what, detail=detail))


def sequence_steps_before_decoupled(g: PipelineGraph) -> Iterator[Problem]:
    """No sequence-batched step downstream of a decoupled step, by any route: directly, through other
    steps, fan-outs (the routers inserted later copy every response through) or joins. Triton cannot keep
    such a sequence whole (SEQUENCE_AFTER_DECOUPLED). Needs the dataflow order."""
    # step -> {decoupled step upstream: the shortest route from it, as step names}
    upstream: dict[str, dict[str, list[str]]] = {}
    for name in g.order or []:
        found: dict[str, list[str]] = {}
        for dep in sorted(g.deps.get(name, ()), key=lambda d: g.steps[d].index):
            routes = dict(upstream.get(dep, {}))
            if g.steps[dep].model.decoupled:
                routes[dep] = []
            for origin, route in routes.items():
                if origin not in found or len(route) + 1 < len(found[origin]):
                    found[origin] = [*route, dep]
        upstream[name] = found
        step = g.steps[name]
        if step.model.sequence_batching is None or not found:
            continue
        nearest = min(found, key=lambda o: (len(found[o]), g.steps[o].index))
        rest = sorted((o for o in found if o != nearest), key=lambda o: g.steps[o].index)
        yield Problem(
            g.step_path(step.index),
            SEQUENCE_AFTER_DECOUPLED.format(
                step=name,
                model=step.model.name,
                source=nearest,
                route=" -> ".join([*found[nearest], name]),
                others=f"; also of decoupled step(s) {', '.join(map(repr, rest))}" if rest else "",
                source_model=g.steps[nearest].model.name,
            ),
        )


# Triton's instance count for a model with no instance group in a pod without GPUs, by backend (core's
# SetDefaultInstanceCount: 2 CPU instances for these backends, 1 for the rest)
DEFAULT_CPU_INSTANCES = {"onnxruntime": 2, "tensorflow": 2}


def max_instances(model: Model, server_gpus: int) -> int:
    """How many instances of the model Triton may run at once in a pod with `server_gpus` GPUs: a GPU (or
    AUTO) group's count is per GPU unless it pins GPUs; no group at all is one instance per GPU, and
    without GPUs Triton's default count for the backend."""
    if not model.instances:
        if server_gpus:
            return server_gpus
        return DEFAULT_CPU_INSTANCES.get(_backend(model), 1)
    total = 0
    for inst in model.instances:
        per_gpu = inst.kind in ("GPU", "AUTO") and server_gpus > 0
        total += inst.count * (len(inst.gpus) or server_gpus if per_gpu else 1)
    return total


def steps_before_a_sequence_keep_order(g: PipelineGraph) -> Iterator[Problem]:
    """Every step upstream of a sequence-batched step passes a sequence's requests on in the order they
    came (UNORDERED_BEFORE_SEQUENCE): one instance, or dynamic batching with preserveOrdering. A sequence
    step itself keeps its sequences in order (its batcher binds each to one slot), and so does what it
    feeds only through other sequence steps. Needs the dataflow order."""
    gpus = g.spec.server.gpus
    for name in g.order or []:
        step = g.steps[name]
        model = step.model
        if model.sequence_batching is not None:
            continue
        db = model.dynamic_batching
        instances = max_instances(model, gpus)
        if instances <= 1 or (db is not None and db.preserve_ordering):
            continue
        route = g.route_to_sequence_step(name)
        if route is None:
            continue
        fix = KEEP_ORDER_WITH_BATCHER if model.max_batch_size > 0 else KEEP_ORDER_WITH_ONE_INSTANCE
        yield Problem(
            g.step_path(step.index),
            UNORDERED_BEFORE_SEQUENCE.format(
                step=name,
                model=model.name,
                instances=instances,
                sequence=route[-1],
                route=" -> ".join(route),
                fix=fix.format(model=model.name),
            ),
        )


# --------------------------------------------------------------------------- conditions (`when`)

INTEGER_TYPES = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"})
FLOAT_TYPES = frozenset({"FP16", "FP32", "FP64", "BF16"})
STRING_TYPES = frozenset({"BYTES", "STRING"})


def fits_type(data_type: str, value: object) -> str | None:
    """None when `value` can be compared with (or fill) a `data_type` tensor; else what to give."""
    if data_type == "BOOL":
        return None if isinstance(value, bool) else "true or false"
    if data_type in STRING_TYPES:
        return None if isinstance(value, str) else "a string"
    if data_type in INTEGER_TYPES:
        if isinstance(value, int) and not isinstance(value, bool):
            return None if value >= 0 or data_type.startswith("INT") else "a non-negative integer"
        return "an integer"
    return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"


def switch_names_a_step(g: PipelineGraph, name: str, guard: Guard, path: str) -> Iterator[Problem]:
    """A switch's case names a step of the pipeline that no other `when` or case guards."""
    if name not in g.first_step:
        known = ", ".join(g.first_step)
        yield Problem(path, SWITCH_UNKNOWN_STEP.format(name=name, pipeline=g.pipeline.name, known=known))
        return
    other = g.guards.get(name)
    if other is not None:
        yield Problem(path, SWITCH_STEP_GUARDED_TWICE.format(name=name, when=other.said(), where=other.path))


def condition_fits(
    g: PipelineGraph, path: str, src: str, comparisons: Sequence[tuple[str, str, object]]
) -> Iterator[Problem]:
    """A condition (a `when`, a switch) reads a pipeline input or an unconditional step's output, one
    value per request, of a data type each of its comparisons (path, operator, value) compares, against
    values of that type."""
    head = producer(src)
    if head != INPUTS and g.when(head) is not None:
        yield Problem(f"{path}.tensor", CONDITION_FROM_BRANCH.format(ref=src, step=head))
        return
    if any(d != 1 for d in g.per_request(src)):
        yield Problem(
            f"{path}.tensor", CONDITION_NOT_SCALAR.format(ref=src, dims=_fmt_dims(g.catalogue[src].full_dims))
        )
        return
    data_type = g.catalogue[src].data_type
    for where, operator, value in comparisons:
        numeric = operator in ("greaterThan", "lessThan")
        if (numeric and data_type not in INTEGER_TYPES | FLOAT_TYPES) or (
            not numeric and data_type in FLOAT_TYPES
        ):
            yield Problem(where, CONDITION_TYPE.format(operator=operator, ref=src, data_type=data_type))
            continue
        for k, item in enumerate(value if isinstance(value, list) else [value]):
            if numeric:
                want = "a number" if isinstance(item, (bool, str)) else None
            else:
                want = fits_type(data_type, item)
            if want:
                at = f"{where}.in[{k}]" if isinstance(value, list) else f"{where}.{operator}"
                message = CONDITION_VALUE.format(
                    operator=operator, data_type=data_type, ref=src, value=item, want=want
                )
                yield Problem(at, message)


def _branch(g: PipelineGraph, ref: str) -> Guard | None:
    """The condition a reference's producer runs under (None: every request)."""
    head = producer(ref)
    return None if head == INPUTS or head not in g.steps else g.when(head)


def branches_meet_at_outputs(g: PipelineGraph) -> Iterator[Problem]:
    """A step reading a conditional step's output carries the same condition: branches meet only at
    the pipeline's outputs (orFrom)."""
    for step in g.steps.values():
        for key, ref in sorted(step.inputs.items()):
            source = _branch(g, ref)
            if source is not None and source != g.when(step.name):
                yield Problem(
                    f"{g.step_path(step.index)}.inputs.{key}",
                    BRANCH_READ_ACROSS.format(
                        step=step.name, ref=ref, source=producer(ref), when=source.said()
                    ),
                )


def conditions_with_state(g: PipelineGraph) -> Iterator[Problem]:
    """In a pipeline with conditions, a decoupled step stands in a branch (the orchestrator streams its
    responses), and sequence-batched and decoupled steps do not meet (the orchestrator passes a
    sequence's correlation ID and flags on only when it does not stream)."""
    decoupled = [s for s in g.steps.values() if s.model.decoupled]
    for step in decoupled:
        if g.when(step.name) is None:
            yield Problem(
                g.step_path(step.index),
                CONDITION_AFTER_DECOUPLED.format(
                    step=step.name, model=step.model.name, pipeline=g.pipeline.name
                ),
            )
    if not decoupled:
        return
    for step in g.steps.values():
        if step.model.sequence_batching is not None:
            yield Problem(
                g.step_path(step.index),
                CONDITION_SEQUENCE_AND_DECOUPLED.format(
                    step=step.name,
                    model=step.model.name,
                    decoupled=decoupled[0].name,
                    pipeline=g.pipeline.name,
                ),
            )


def speculation_stateless(g: PipelineGraph) -> Iterator[Problem]:
    """`speculative` runs every branch for every request: only in a pipeline with conditions, and only
    where no branch keeps a sequence's state or streams."""
    if not g.pipeline.speculative:
        return
    path = f"{g.path}.speculative"
    if not g.conditional:
        yield Problem(path, SPECULATIVE_WITHOUT_CONDITIONS.format(pipeline=g.pipeline.name))
        return
    for step in g.steps.values():
        guard = g.when(step.name)
        if guard is None:
            continue
        for held, kind, why in (
            (step.model.sequence_batching is not None, "sequence-batched", SPECULATIVE_SEQUENCE),
            (step.model.decoupled, "decoupled", SPECULATIVE_DECOUPLED),
        ):
            if held:
                message = SPECULATIVE_WITH_STATE.format(
                    step=step.name, model=step.model.name, when=guard.said(), kind=kind, why=why
                )
                yield Problem(path, message)


def merges_fit(g: PipelineGraph) -> Iterator[Problem]:
    """An output's orFrom and default: only with conditions; each source agrees with `from`, none after
    one that runs for every request; a default fits the data type and fixed dims, and some source of the
    output may be skipped."""
    for j, o in enumerate(g.pipeline.outputs):
        path = f"{g.path}.outputs[{j}]"
        if not g.conditional:
            for name, given in (("orFrom", o.or_from), ("default", o.default is not None)):
                if given:
                    yield Problem(
                        f"{path}.{name}",
                        MERGE_WITHOUT_CONDITIONS.format(field=name, pipeline=g.pipeline.name),
                    )
            continue
        sources = g.merges.get(o.name)
        if not sources:
            continue
        first = g.catalogue[sources[0]]
        for k, ref in enumerate(sources[1:]):
            where = f"{path}.orFrom[{k}]"
            if is_input_ref(ref):
                yield Problem(where, OUTPUT_FROM_INPUT)
                continue
            have = g.catalogue[ref]
            if not same_type(have.data_type, first.data_type) or have.full_dims != first.full_dims:
                yield Problem(
                    where,
                    MERGE_MISMATCH.format(
                        ref=ref,
                        have=f"{have.data_type} {_fmt_dims(have.full_dims)}",
                        first=sources[0],
                        want=f"{first.data_type} {_fmt_dims(first.full_dims)}",
                    ),
                )
            if _branch(g, sources[k]) is None:
                yield Problem(where, MERGE_NEVER_READ.format(ref=ref, first=sources[k]))
        if o.default is None:
            continue
        always = next((ref for ref in sources if _branch(g, ref) is None), None)
        if always is not None:
            yield Problem(f"{path}.default", DEFAULT_UNCONDITIONAL.format(ref=always))
            continue
        want = fits_type(first.data_type, o.default)
        if first.data_type == "BF16":
            yield Problem(f"{path}.default", DEFAULT_BF16)
        elif want:
            message = DEFAULT_VALUE.format(
                name=o.name, data_type=first.data_type, ref=sources[0], value=o.default, want=want
            )
            yield Problem(f"{path}.default", message)
        elif any(d == -1 for d in g.per_request(sources[0])):
            yield Problem(f"{path}.default", DEFAULT_DIMS.format(dims=_fmt_dims(first.full_dims)))
