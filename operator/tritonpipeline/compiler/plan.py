"""Plan a model repository: check every rule, then turn each resolved pipeline into an ensemble, with a
router inserted wherever `fanOut: router` sends one tensor to several consumers.

Pure: takes a parsed spec, returns a `RepositoryPlan` or raises `SpecError` with every problem found.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from ..errors import Problem, SpecError
from ..spec import TritonPipeline
from .branches import plan_conditional
from .plan_types import (
    INPUTS,
    ROUTER_INPUT,
    Consumer,
    EnsemblePlan,
    PipelineGraph,
    RepositoryPlan,
    RouterPlan,
    StepPlan,
    Tensor,
    is_input_ref,
    producer,
)
from .resolve import resolve_pipeline
from .rules import check_spec

MAX_ROUTER_NAME = 100


def plan_repository(tp: TritonPipeline, *, cpu_only: bool = False) -> RepositoryPlan:
    """Check every rule and plan the repository. Raises SpecError with all problems found."""
    spec = tp.spec
    cpu = cpu_only or spec.server.gpus == 0
    problems: list[Problem] = check_spec(spec)
    taken = {m.name for m in spec.models} | {p.name for p in spec.pipelines}  # Triton's one namespace
    ensembles = []
    orchestrators = []
    for i in range(len(spec.pipelines)):
        g = resolve_pipeline(spec, i)
        problems += g.problems
        if g.problems:
            continue
        if g.conditional:
            parts, orchestrator = plan_conditional(g, taken, cpu_only=cpu)
            ensembles += parts
            orchestrators.append(orchestrator)
        else:
            ensembles.append(plan_ensemble(g, taken, cpu_only=cpu))
    if problems:
        raise SpecError(problems)
    return RepositoryPlan(
        models=tuple(spec.models),
        ensembles=tuple(ensembles),
        cpu_only=cpu,
        orchestrators=tuple(orchestrators),
    )


def keeps_batch_dimension(g: PipelineGraph) -> bool:
    """Whether the ensemble is rendered with the pipeline's maxBatchSize (dims without the batch
    dimension) or, when that cannot give clients the tensors its steps return, with maxBatchSize 0 and
    full shapes (the same requests and the same tensors either way).

    Triton hands an ensemble output from a step that does not batch to a batching ensemble's client
    unchanged only when its shape does not match the output's declared dims; when it does, Triton puts a
    dimension of 1 in front (ReshapeTensorDims in Triton's ensemble scheduler). A step's rank-1 output
    ([-1], one value per batch item) has no dims left once the batch dimension is taken off, and Triton
    requires dims: dims [1] gives [1, 1] for one item, `reshape { shape: [] }` gives [batch, 1] for every
    batch. An ensemble that does not batch passes every tensor on as its step wrote it, and the steps
    still hold requests to their own maxBatchSize."""
    return g.batching and all(len(g.catalogue[src].full_dims) > 1 for src in g.outputs.values())


def ensemble_output(t: Tensor, batching: bool) -> Tensor:
    """How an ensemble declares an output whose producer has full shape `t.full_dims`: a batching
    ensemble without the batch dimension (a step that does not batch counts its first dimension as the
    batch; `keeps_batch_dimension` leaves them at least one more), any other with the full shape."""
    return replace(t, full_dims=t.full_dims[1:]) if batching else t


def _sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


def router_name(pipeline: str, source: str, taken: set[str]) -> str:
    """Deterministic, Triton- and Kubernetes-safe router name; hashed when long or clashing."""
    base = _sanitize(f"{pipeline}__{source.replace('.', '__', 1)}__router")
    if len(base) <= MAX_ROUTER_NAME and base not in taken:
        return base
    digest = hashlib.sha256(f"{pipeline}\0{source}".encode()).hexdigest()[:10]
    return f"{base[: MAX_ROUTER_NAME - 12]}_{digest}"


def plan_ensemble(g: PipelineGraph, taken: set[str], *, cpu_only: bool) -> EnsemblePlan:
    """The ensemble of a pipeline that broke no rule. Router names it picks are added to `taken`.

    Each tensor is written under one ensemble name: a pipeline input's own name, the pipeline output
    name it is exposed as, or else its reference `STEP.TENSOR`. Under fanOut: router, a tensor with
    several consumers goes through a router that writes `ROUTER.OUTPUT_k` for consumer k (a pipeline
    output keeps its own name). An internal name that a pipeline input or output already uses (they may
    contain '.', as Triton allows) gets a suffix `~2`, `~3`, ... instead."""
    p = g.pipeline
    interface = {i.name for i in p.inputs} | {o.name for o in p.outputs}

    def internal(name: str) -> str:
        unique, k = name, 2
        while unique in interface:
            unique, k = f"{name}~{k}", k + 1
        return unique

    read: dict[Consumer, str] = {}  # consumer -> the ensemble tensor it reads
    write: dict[str, str] = {}  # reference -> the ensemble tensor its producer writes
    routers: list[RouterPlan] = []
    batching = keeps_batch_dimension(g)
    for src in sorted(g.consumers, key=lambda ref: _source_rank(g, ref)):
        cs = g.consumers[src]
        if len(cs) > 1 and p.fan_out == "router":
            # step names too: a step named like the router would write the same `NAME.OUTPUT_k` tensors
            router = _router(
                g, src, router_name(p.name, src, taken | set(g.steps)), batching=batching, cpu_only=cpu_only
            )
            taken.add(router.name)
            routers.append(router)
            write[src] = src.split(".", 1)[1] if is_input_ref(src) else internal(src)
            for out, c in router.outputs:
                read[c] = c.name if c.step is None else internal(f"{router.name}.{out}")
            continue
        named = [c.name for c in cs if c.step is None]
        tname = src.split(".", 1)[1] if is_input_ref(src) else (named[0] if named else internal(src))
        write[src] = tname
        for c in cs:
            read[c] = tname
    steps = [_step_plan(g, name, read, write) for name in g.order or []]
    for r in routers:
        in_map = ((ROUTER_INPUT, write[r.source]),)
        out_map = tuple(sorted((out, read[c]) for out, c in r.outputs))
        steps.append(StepPlan(name=r.name, model=r.name, input_map=in_map, output_map=out_map))
    return EnsemblePlan(
        name=p.name,
        max_batch_size=g.max_batch_size if batching else 0,
        inputs=tuple(
            (i.name, ensemble_output(g.catalogue[f"{INPUTS}.{i.name}"], batching)) for i in p.inputs
        ),
        outputs=tuple((o.name, ensemble_output(g.catalogue[g.outputs[o.name]], batching)) for o in p.outputs),
        steps=tuple(steps),
        routers=tuple(routers),
        fan_out=p.fan_out,
    )


def _step_plan(g: PipelineGraph, name: str, read: dict[Consumer, str], write: dict[str, str]) -> StepPlan:
    """A step's maps: every input it maps, and each of its outputs that something reads."""
    step = g.steps[name]
    in_map = tuple(sorted((key, read[Consumer(name, key)]) for key in step.inputs))
    refs = ((o.name, f"{name}.{o.name}") for o in step.model.outputs)
    out_map = tuple(sorted((out, write[ref]) for out, ref in refs if ref in write))
    return StepPlan(
        name=name, model=step.model.name, input_map=in_map, output_map=out_map, version=step.version
    )


def _router(g: PipelineGraph, src: str, name: str, *, batching: bool, cpu_only: bool) -> RouterPlan:
    """The router copying `src` to each of its consumers, in the order they were declared, in an
    ensemble that batches or not (`keeps_batch_dimension`)."""
    tensor = g.catalogue[src]
    # the router of an optional input does not batch: Triton cannot size the batch of a batching model's
    # request that carries no input ("out of bounds index 0: request has 0 inputs")
    batched = batching and _batched(g, src) and not tensor.optional
    cs = g.consumers[src]
    gpu = not cpu_only and _next_to_gpu(g, src, cs)
    labels = None
    if not is_input_ref(src) and any(c.step is None for c in cs):
        step, output = src.split(".", 1)
        model = g.steps[step].model
        label = next((o.label_filename for o in model.outputs if o.name == output), None)
        labels = (label, model.name) if label else None
    return RouterPlan(
        name=name,
        pipeline=g.pipeline.name,
        source=src,
        data_type=tensor.data_type,
        dims=tensor.full_dims[1:] if batched else tensor.full_dims,
        max_batch_size=g.max_batch_size if batched else 0,
        gpu=gpu,
        outputs=tuple((f"OUTPUT_{k}", c) for k, c in enumerate(cs)),
        optional=tensor.optional,
        pinned_gpu=_pinned_gpu(g, src, cs) if gpu and g.spec.server.gpus > 1 else None,
        labels=labels,
    )


def _pinned_gpu(g: PipelineGraph, src: str, cs: list[Consumer]) -> int | None:
    """The one GPU a router feeding a sequence step runs on (a GPU group without `gpus` runs an instance
    per GPU, which would let a sequence's requests overtake each other): the first GPU its sequence-bound
    consumers, else its producer, pin, so that the tensor stays on that GPU; else GPU 0. None when it
    feeds no sequence step."""
    bound = [c.step for c in cs if c.step and _feeds_a_sequence(g, c.step)]
    if not bound:
        return None
    for name in [*bound, producer(src)]:
        step = g.steps.get(name)
        for inst in step.model.instances if step else ():
            if inst.kind == "GPU" and inst.gpus:
                return inst.gpus[0]
    return 0


def _feeds_a_sequence(g: PipelineGraph, step: str) -> bool:
    """The step is sequence-batched or feeds one."""
    return g.steps[step].model.sequence_batching is not None or g.route_to_sequence_step(step) is not None


def _batched(g: PipelineGraph, src: str) -> bool:
    """Whether a tensor carries the ensemble's batch dimension: pipeline inputs and outputs of
    batching steps do. A router copies an unbatched tensor (from a step with maxBatchSize 0) with
    maxBatchSize 0 and the tensor's full shape: Triton exempts such steps from the ensemble's batch
    size, whereas a batching router would need the full shape minus its first dimension (nothing
    at all for a rank-1 tensor: "must specify 'dims'") and would cap that dimension at the
    ensemble's maxBatchSize at run time."""
    head = producer(src)
    return head == INPUTS or g.steps[head].model.max_batch_size > 0


def _source_rank(g: PipelineGraph, src: str) -> tuple[int, str]:
    """Pipeline inputs first, then step outputs by their step's position, then by name."""
    head = producer(src)
    return (-1 if head == INPUTS else g.steps[head].index, src)


def _next_to_gpu(g: PipelineGraph, src: str, cs: list[Consumer]) -> bool:
    """Whether the producer or any consumer of `src` has a GPU instance group."""
    neighbours = [producer(src), *(c.step for c in cs if c.step)]
    return any(inst.kind == "GPU" for s in neighbours if s in g.steps for inst in g.steps[s].model.instances)
