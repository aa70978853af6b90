"""Pipeline graph: resolve a spec's dataflow, enforce the ensemble rules, plan routers.

Pure: takes a parsed spec, returns a `RepositoryPlan` or raises `SpecError` with every problem found.
The rules mirror Triton core's own ensemble checks so that a bad pipeline fails before any pod starts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ..errors import Problem, SpecError
from ..spec import InputTensor, Model, OutputTensor, Pipeline, PipelineSpec, TritonPipeline

INPUTS = "inputs"  # reference prefix for pipeline inputs: `inputs.NAME`
ROUTER_INPUT = "INPUT"
MAX_ROUTER_NAME = 100


@dataclass(frozen=True)
class Tensor:
    """Type and full shape (batch dimension included when the owner batches) of one dataflow edge."""

    data_type: str
    full_dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None  # ensemble outputs only: Triton's `reshape { shape: [...] }`


def ensemble_output(t: Tensor, batching: bool) -> Tensor:
    """How an ensemble declares an output whose producer has full shape `t.full_dims`.

    A non-batching ensemble declares the full shape. A batching one declares it without the batch
    dimension; a step that does not batch counts its first dimension as the batch, which Triton
    accepts (it compares full shapes, `[-1, *dims]` against the step's dims). For a rank-1 output of
    such a step that leaves no dims, and Triton refuses an output without dims ("must specify
    'dims'"). The loadable form is Triton's idiom for one value per batch item: dims [1] with
    reshape [] (full shape [-1], which matches the step's [N]); clients receive [batch, 1]."""
    if not batching:
        return t
    if len(t.full_dims) > 1:
        return Tensor(t.data_type, t.full_dims[1:])
    return Tensor(t.data_type, (1,), reshape=())


@dataclass(frozen=True)
class Consumer:
    """Where a tensor goes: a model input of a step, or a pipeline output."""

    step: str | None  # None: a pipeline output
    name: str  # model input name, or pipeline output name

    @property
    def label(self) -> str:
        return f"{self.step}.{self.name}" if self.step else f"outputs.{self.name}"


@dataclass(frozen=True)
class StepPlan:
    name: str
    model: str
    input_map: tuple[tuple[str, str], ...]  # (model input, ensemble tensor), sorted
    output_map: tuple[tuple[str, str], ...]  # (model output, ensemble tensor), sorted


@dataclass(frozen=True)
class RouterPlan:
    """A generated Python-backend model copying one tensor to one output per consumer."""

    name: str
    pipeline: str
    source: str  # `inputs.NAME` or `STEP.TENSOR`
    data_type: str
    dims: tuple[int, ...]  # relative to max_batch_size
    max_batch_size: int
    gpu: bool
    outputs: tuple[tuple[str, Consumer], ...]  # (router output name, consumer)


@dataclass(frozen=True)
class EnsemblePlan:
    name: str
    max_batch_size: int
    inputs: tuple[tuple[str, Tensor], ...]  # dims relative to max_batch_size
    outputs: tuple[tuple[str, Tensor], ...]
    steps: tuple[StepPlan, ...]
    routers: tuple[RouterPlan, ...]
    fan_out: str


@dataclass(frozen=True)
class RepositoryPlan:
    models: tuple[Model, ...]
    ensembles: tuple[EnsemblePlan, ...]
    cpu_only: bool

    @property
    def routers(self) -> tuple[RouterPlan, ...]:
        return tuple(r for e in self.ensembles for r in e.routers)


@dataclass
class _Ctx:
    problems: list[Problem] = field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))


def full_dims(dims: tuple[int, ...] | list[int], batching: bool) -> tuple[int, ...]:
    return (-1, *dims) if batching else tuple(dims)


def dims_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Equal rank and every dimension equal, with -1 matching anything (Triton's ensemble check)."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _fmt_dims(dims: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


def router_name(pipeline: str, source: str, taken: set[str]) -> str:
    """Deterministic, Triton- and Kubernetes-safe router name; hashed when long or clashing."""
    base = _sanitize(f"{pipeline}__{source.replace('.', '__', 1)}__router")
    if len(base) <= MAX_ROUTER_NAME and base not in taken:
        return base
    digest = hashlib.sha256(f"{pipeline}\0{source}".encode()).hexdigest()[:10]
    return f"{base[: MAX_ROUTER_NAME - 12]}_{digest}"


def check_models(spec: PipelineSpec, ctx: _Ctx) -> None:
    """Per-model rules: unique names, control tensors, batching bounds."""
    seen: dict[str, int] = {}
    for i, model in enumerate(spec.models):
        path = f"spec.models[{i}]"
        if model.name in seen:
            ctx.add(
                f"{path}.name", f"duplicate model name {model.name!r} (also spec.models[{seen[model.name]}])"
            )
        seen.setdefault(model.name, i)
        tensor_lists: tuple[tuple[str, Sequence[InputTensor | OutputTensor]], ...] = (
            ("inputs", model.inputs),
            ("outputs", model.outputs),
        )
        for kind, tensors in tensor_lists:
            names: dict[str, int] = {}
            for j, t in enumerate(tensors):
                if t.name in names:
                    ctx.add(f"{path}.{kind}[{j}].name", f"duplicate tensor name {t.name!r} in model {kind}")
                names.setdefault(t.name, j)
        input_names = {t.name for t in model.inputs}
        sb = model.sequence_batching
        if sb is not None:
            for field_name, value in (
                ("start", sb.controls.start),
                ("end", sb.controls.end),
                ("ready", sb.controls.ready),
                ("correlationId", sb.controls.correlation_id),
            ):
                if value and value in input_names:
                    ctx.add(
                        f"{path}.sequenceBatching.controls.{field_name}",
                        f"control tensor {value!r} is also listed under inputs; the sequence batcher fills "
                        "control tensors, so remove it from inputs",
                    )
            for j, state in enumerate(sb.states):
                if state.input_name in input_names:
                    ctx.add(
                        f"{path}.sequenceBatching.states[{j}].inputName",
                        f"state tensor {state.input_name!r} is also listed under inputs; Triton fills it",
                    )
            for j, size in enumerate(sb.preferred_batch_sizes):
                if size > model.max_batch_size:
                    ctx.add(
                        f"{path}.sequenceBatching.preferredBatchSizes[{j}]",
                        f"preferred batch size {size} exceeds maxBatchSize {model.max_batch_size}",
                    )
        db = model.dynamic_batching
        if db is not None:
            if model.max_batch_size == 0:
                ctx.add(f"{path}.dynamicBatching", "dynamic batching needs maxBatchSize > 0")
            for j, size in enumerate(db.preferred_batch_sizes):
                if model.max_batch_size and size > model.max_batch_size:
                    ctx.add(
                        f"{path}.dynamicBatching.preferredBatchSizes[{j}]",
                        f"preferred batch size {size} exceeds maxBatchSize {model.max_batch_size}",
                    )


# Triton core refuses an ensemble whose step (or whose set of outputs) "receives inputs originated from
# different decoupled models" (ensemble_utils.cc, ValidateEnsembleConfig).
DECOUPLED_ORIGINS = (
    "{what} receives tensors that originate from different decoupled steps ({detail}); Triton refuses "
    "this ensemble ('receives inputs originated from different decoupled models'): all inputs of a step, "
    "and all outputs of a pipeline, must descend from the same nearest decoupled step, or all from none"
)


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
            head = ref.split(".", 1)[0]
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


def _parse_ref(ref: str) -> tuple[str, str] | None:
    head, dot, tail = ref.partition(".")
    if not dot or not head or not tail:
        return None
    return head, tail


class _PipelineCompiler:
    """Resolves one pipeline's references and plans its ensemble (with routers)."""

    def __init__(self, spec: PipelineSpec, index: int, ctx: _Ctx, taken: set[str], cpu_only: bool) -> None:
        self.spec = spec
        self.p: Pipeline = spec.pipelines[index]
        self.path = f"spec.pipelines[{index}]"
        self.ctx = ctx
        self.taken = taken
        self.cpu_only = cpu_only
        self.models = {m.name: m for m in spec.models}
        self.unresolved = False  # a reference failed: follow-on "unused" findings would be noise
        self.step_names = list(dict.fromkeys(s.step_name for s in self.p.steps))  # declared, unique
        self.step_name_set = set(self.step_names)

    # -- helpers ---------------------------------------------------------------------------

    def _steps_path(self, j: int) -> str:
        return f"{self.path}.steps[{j}]"

    def run(self) -> EnsemblePlan | None:
        p, ctx = self.p, self.ctx
        before = len(ctx.problems)
        steps = self._check_steps()
        inputs = self._check_inputs()
        mbs = self._batch_size(steps)
        batching = mbs > 0
        # tensor catalogue: reference -> Tensor
        catalogue: dict[str, Tensor] = {
            f"{INPUTS}.{i.name}": Tensor(i.data_type, full_dims(i.dims, batching)) for i in p.inputs
        }
        for step_name, (_, model) in steps.items():
            for out in model.outputs:
                catalogue[f"{step_name}.{out.name}"] = Tensor(
                    out.data_type, full_dims(out.dims, model.max_batch_size > 0)
                )
        consumers: dict[str, list[Consumer]] = {}
        deps: dict[str, set[str]] = {s: set() for s in steps}
        for step_name, (j, model) in steps.items():
            self._check_step_inputs(j, step_name, model, steps, inputs, catalogue, consumers, deps)
        outputs = self._check_outputs(steps, catalogue, consumers, deps)
        order = self._check_cycles(steps, deps)
        if order is not None:
            self._check_reachability(steps, inputs, consumers, deps, dead_steps=not self.unresolved)
            self._check_decoupled(steps, order)
        if len(ctx.problems) > before:
            return None
        return self._plan(steps, order or [], mbs, catalogue, consumers, outputs)

    def _check_steps(self) -> dict[str, tuple[int, Model]]:
        steps: dict[str, tuple[int, Model]] = {}
        seen: dict[str, int] = {}
        names = [m.name for m in self.spec.models]
        for j, step in enumerate(self.p.steps):
            path = self._steps_path(j)
            name = step.step_name
            field_path = f"{path}.name" if step.name else f"{path}.model"
            if name == INPUTS:
                self.ctx.add(field_path, f"step name {INPUTS!r} is reserved for pipeline inputs")
                self.unresolved = True
                continue
            if name in seen:
                self.ctx.add(
                    field_path,
                    f"duplicate step name {name!r} (also {self._steps_path(seen[name])}); give one a "
                    "distinct `name` — each tensor must have exactly one producer",
                )
                self.unresolved = True
                continue
            seen[name] = j
            model = self.models.get(step.model)
            if model is None:
                self.ctx.add(
                    f"{path}.model", f"unknown model {step.model!r} (models: {', '.join(sorted(names))})"
                )
                self.unresolved = True
                continue
            steps[name] = (j, model)
        return steps

    def _check_inputs(self) -> dict[str, int]:
        inputs: dict[str, int] = {}
        for j, i in enumerate(self.p.inputs):
            if i.name in inputs:
                self.ctx.add(f"{self.path}.inputs[{j}].name", f"duplicate pipeline input {i.name!r}")
                self.unresolved = True
                continue
            inputs[i.name] = j
        out_names: dict[str, int] = {}
        for j, o in enumerate(self.p.outputs):
            if o.name in out_names:
                self.ctx.add(
                    f"{self.path}.outputs[{j}].name",
                    f"duplicate pipeline output {o.name!r}: each tensor must have exactly one producer",
                )
            elif o.name in inputs:
                self.ctx.add(
                    f"{self.path}.outputs[{j}].name", f"{o.name!r} is already the name of a pipeline input"
                )
            out_names.setdefault(o.name, j)
        return inputs

    def _batch_size(self, steps: dict[str, tuple[int, Model]]) -> int:
        """The ensemble's maxBatchSize: as set, or the smallest of its batching steps (Triton exempts
        steps with maxBatchSize 0; their dims are full shapes and are checked as such)."""
        batching = {s: m.max_batch_size for s, (_, m) in steps.items() if m.max_batch_size > 0}
        derived = min(batching.values(), default=0)
        if self.p.max_batch_size is None:
            return derived
        limiting = sorted(s for s, size in batching.items() if size < self.p.max_batch_size)
        if limiting:
            detail = ", ".join(f"{s} ({steps[s][1].name}: {batching[s]})" for s in limiting)
            self.ctx.add(
                f"{self.path}.maxBatchSize",
                f"ensemble maxBatchSize {self.p.max_batch_size} exceeds the maxBatchSize of step(s) "
                f"{detail}; it must be <= every batching step's maxBatchSize",
            )
        return self.p.max_batch_size

    def _resolve(
        self,
        ref: str,
        path: str,
        steps: dict[str, tuple[int, Model]],
        inputs: dict[str, int],
    ) -> str | None:
        parsed = _parse_ref(ref) if isinstance(ref, str) else None
        if parsed is None:
            self.ctx.add(path, f"expected 'inputs.NAME' or 'STEP.TENSOR', got {ref!r}")
            self.unresolved = True
            return None
        head, tail = parsed
        if head == INPUTS:
            if tail not in inputs:
                known = ", ".join(i.name for i in self.p.inputs) or "none"
                self.ctx.add(path, f"unknown pipeline input {tail!r} (inputs: {known})")
                self.unresolved = True
                return None
            return ref
        if head not in self.step_name_set:
            self.ctx.add(path, f"unknown step {head!r} (steps: {', '.join(self.step_names)})")
            self.unresolved = True
            return None
        if head not in steps:
            return None  # that step is already reported (unknown model or duplicate)
        model = steps[head][1]
        if tail not in {o.name for o in model.outputs}:
            outs = ", ".join(o.name for o in model.outputs)
            self.ctx.add(
                path, f"step {head!r} (model {model.name!r}) has no output {tail!r} (outputs: {outs})"
            )
            self.unresolved = True
            return None
        return ref

    def _check_step_inputs(
        self,
        j: int,
        step_name: str,
        model: Model,
        steps: dict[str, tuple[int, Model]],
        inputs: dict[str, int],
        catalogue: dict[str, Tensor],
        consumers: dict[str, list[Consumer]],
        deps: dict[str, set[str]],
    ) -> None:
        path = f"{self._steps_path(j)}.inputs"
        declared = {t.name: t for t in model.inputs}
        sb = model.sequence_batching
        controls = set(sb.controls.names()) if sb else set()
        states = {s.input_name for s in sb.states} if sb else set()
        mapping = self.p.steps[j].inputs
        for key, ref in mapping.items():
            kpath = f"{path}.{key}"
            if key in controls:
                self.ctx.add(
                    kpath,
                    f"{key!r} is a sequence control of model {model.name!r}; Triton's sequence batcher fills "
                    "it from the request's sequence flags, so do not map it",
                )
                self.unresolved = True
                continue
            if key in states:
                self.ctx.add(kpath, f"{key!r} is an implicit state of model {model.name!r}; do not map it")
                self.unresolved = True
                continue
            if key not in declared:
                hint = (
                    " (sequence controls are only available on models with sequenceBatching)"
                    if key.upper() in {"START", "END", "READY", "CORRID"} and sb is None
                    else ""
                )
                self.ctx.add(
                    kpath,
                    f"model {model.name!r} has no input {key!r} (inputs: {', '.join(declared)}){hint}",
                )
                self.unresolved = True
                continue
            src = self._resolve(ref, kpath, steps, inputs)
            if src is None:
                self.unresolved = True
                continue
            head = src.split(".", 1)[0]
            if head != INPUTS:
                deps[step_name].add(head)
            consumers.setdefault(src, []).append(Consumer(step_name, key))
            have = catalogue[src]
            want = declared[key]
            want_full = full_dims(want.dims, model.max_batch_size > 0)
            if _norm_type(have.data_type) != _norm_type(want.data_type):
                self.ctx.add(
                    kpath,
                    f"data type mismatch: {src} is {have.data_type} but input {key!r} of model "
                    f"{model.name!r} expects {want.data_type}",
                )
            elif not dims_compatible(have.full_dims, want_full):
                self.ctx.add(kpath, self._dims_message(src, have, key, model, want_full))
        for t in model.inputs:
            if t.name not in mapping and not t.optional and t.name not in controls | states:
                # (a control or state also listed under inputs is reported once, by check_models)
                self.unresolved = True
                self.ctx.add(
                    path,
                    f"required input {t.name!r} of model {model.name!r} is not mapped "
                    f"(add `{t.name}: inputs.NAME` or `{t.name}: STEP.TENSOR`)",
                )

    def _dims_message(self, src: str, have: Tensor, key: str, model: Model, want: tuple[int, ...]) -> str:
        msg = (
            f"shape mismatch: {src} has dims {_fmt_dims(have.full_dims)} but input {key!r} of model "
            f"{model.name!r} expects {_fmt_dims(want)} (batch dimension included, -1 matches any size)"
        )
        if src.startswith(INPUTS + ".") and len(have.full_dims) != len(want):
            msg += (
                "; pipeline input dims exclude the batch dimension when the pipeline batches "
                "(maxBatchSize > 0) and include it otherwise"
            )
        return msg

    def _check_outputs(
        self,
        steps: dict[str, tuple[int, Model]],
        catalogue: dict[str, Tensor],
        consumers: dict[str, list[Consumer]],
        deps: dict[str, set[str]],
    ) -> dict[str, str]:
        outputs: dict[str, str] = {}
        for j, o in enumerate(self.p.outputs):
            opath = f"{self.path}.outputs[{j}].from"
            parsed = _parse_ref(o.source)
            if parsed is not None and parsed[0] == INPUTS:
                self.ctx.add(
                    opath, "a pipeline output must come from a step output, not straight from an input"
                )
                continue
            src = self._resolve(o.source, opath, steps, {})
            if src is None:
                continue
            outputs[o.name] = src
            consumers.setdefault(src, []).append(Consumer(None, o.name))
            if self.p.fan_out == "shared":
                named = [c.name for c in consumers[src] if c.step is None]
                if len(named) > 1:
                    self.ctx.add(
                        opath,
                        f"{src} is exposed as pipeline outputs {', '.join(named)}; with fanOut: shared one "
                        "tensor can have only one name — use fanOut: router",
                    )
        return outputs

    def _check_cycles(
        self, steps: dict[str, tuple[int, Model]], deps: dict[str, set[str]]
    ) -> list[str] | None:
        """Topological order of steps, or None on a cycle (reported with its members).

        Iterative depth-first post-order: dependencies in declaration order, roots in declaration
        order. No recursion, so a chain of any length (declared in any order) cannot hit Python's
        recursion limit."""
        order: list[str] = []
        done: set[str] = set()
        rank = {s: steps[s][0] for s in steps}
        for root in sorted(steps, key=rank.__getitem__):
            if root in done:
                continue
            path: list[str] = [root]  # the current chain of steps being expanded
            on_path: dict[str, int] = {root: 0}  # step -> its position in path
            pending = [iter(sorted(deps[root], key=rank.__getitem__))]
            while pending:
                for dep in pending[-1]:
                    if dep in on_path:
                        cycle = [*path[on_path[dep] :], dep]
                        self.ctx.add(
                            f"{self._steps_path(steps[dep][0])}.inputs",
                            f"cycle in pipeline {self.p.name!r}: {' -> '.join(cycle)}",
                        )
                        return None
                    if dep not in done:
                        on_path[dep] = len(path)
                        path.append(dep)
                        pending.append(iter(sorted(deps[dep], key=rank.__getitem__)))
                        break
                else:  # every dependency of path[-1] is placed: place it
                    node = path.pop()
                    del on_path[node]
                    pending.pop()
                    done.add(node)
                    order.append(node)
        return order

    def _check_reachability(
        self,
        steps: dict[str, tuple[int, Model]],
        inputs: dict[str, int],
        consumers: dict[str, list[Consumer]],
        deps: dict[str, set[str]],
        *,
        dead_steps: bool,
    ) -> None:
        # an input named by a mapping that failed for another reason, or any misspelt `inputs.X`,
        # would make the "unused input" finding noise
        referenced = {v for st in self.p.steps for v in st.inputs.values() if isinstance(v, str)}
        misspelt = any(r.startswith(INPUTS + ".") and r.split(".", 1)[1] not in inputs for r in referenced)
        for name, j in inputs.items():
            if misspelt or f"{INPUTS}.{name}" in referenced:
                continue
            if not consumers.get(f"{INPUTS}.{name}"):
                self.ctx.add(f"{self.path}.inputs[{j}]", f"pipeline input {name!r} is not used by any step")
        for name, (j, _) in steps.items():
            if not self.p.steps[j].inputs:
                self.ctx.add(
                    f"{self._steps_path(j)}.inputs",
                    f"step {name!r} has no inputs, so the ensemble would never run it",
                )
        if not dead_steps:
            return  # unresolved references would make healthy steps and inputs look unused
        # every step must feed some pipeline output, directly or through other steps (Triton refuses a
        # step without output_map)
        useful: set[str] = set()
        frontier = [src.split(".", 1)[0] for src, cs in consumers.items() if any(c.step is None for c in cs)]
        while frontier:
            s = frontier.pop()
            if s in useful or s == INPUTS:
                continue
            useful.add(s)
            frontier.extend(deps.get(s, ()))
        for name, (j, _) in steps.items():
            if name not in useful:
                self.ctx.add(
                    self._steps_path(j),
                    f"step {name!r} does not contribute to any pipeline output (unreachable from outputs)",
                )

    def _check_decoupled(self, steps: dict[str, tuple[int, Model]], order: list[str]) -> None:
        """Triton's decoupled-origin rule (see `decoupled_conflicts`), reported per step and for the
        pipeline outputs."""
        inputs_of = {
            name: [ref for _, ref in sorted(self.p.steps[steps[name][0]].inputs.items())] for name in order
        }
        outputs = [(f"{self.path}.outputs[{j}].from", o.source) for j, o in enumerate(self.p.outputs)]
        decoupled = {name for name, (_, model) in steps.items() if model.decoupled}
        for where, sources in decoupled_conflicts(order, inputs_of, decoupled, outputs):
            detail = "; ".join(
                f"{ref} comes from decoupled step {origin!r}" if origin else f"{ref} from no decoupled step"
                for ref, origin in sources
            )
            if where in steps:
                what, path = f"step {where!r}", f"{self._steps_path(steps[where][0])}.inputs"
            else:
                what, path = f"pipeline {self.p.name!r} (its outputs)", where
            self.ctx.add(path, DECOUPLED_ORIGINS.format(what=what, detail=detail))

    # -- planning ----------------------------------------------------------------------------

    def _plan(
        self,
        steps: dict[str, tuple[int, Model]],
        order: list[str],
        mbs: int,
        catalogue: dict[str, Tensor],
        consumers: dict[str, list[Consumer]],
        outputs: dict[str, str],
    ) -> EnsemblePlan:
        p = self.p
        batching = mbs > 0
        # ensemble tensor name that each consumer reads, and names producers write
        read: dict[Consumer, str] = {}
        write: dict[str, str] = {}  # source reference -> tensor name written by its producer
        routers: list[RouterPlan] = []
        for src in sorted(consumers, key=lambda s: self._source_order(s, steps)):
            cs = consumers[src]
            if len(cs) > 1 and p.fan_out == "router":
                # step names too: a step named like the router would write the same `NAME.OUTPUT_k` tensors
                rname = router_name(p.name, src, self.taken | set(steps))
                self.taken.add(rname)
                tensor = catalogue[src]
                router_outputs = []
                for k, c in enumerate(cs):
                    out = f"OUTPUT_{k}"
                    router_outputs.append((out, c))
                    read[c] = c.name if c.step is None else f"{rname}.{out}"
                write[src] = src.split(".", 1)[1] if src.startswith(INPUTS + ".") else src
                batched = batching and self._batched(src, steps)
                routers.append(
                    RouterPlan(
                        name=rname,
                        pipeline=p.name,
                        source=src,
                        data_type=tensor.data_type,
                        dims=tensor.full_dims[1:] if batched else tensor.full_dims,
                        max_batch_size=mbs if batched else 0,
                        gpu=self._router_on_gpu(src, cs, steps),
                        outputs=tuple(router_outputs),
                    )
                )
                continue
            named = [c.name for c in cs if c.step is None]
            if src.startswith(INPUTS + "."):
                tname = src.split(".", 1)[1]
            elif named:
                tname = named[0]
            else:
                tname = src
            write[src] = tname
            for c in cs:
                read[c] = tname
        plans: list[StepPlan] = []
        for name in order:
            j, model = steps[name]
            in_map = tuple(sorted((key, read[Consumer(name, key)]) for key in p.steps[j].inputs))
            out_map = tuple(
                sorted(
                    (o.name, write[f"{name}.{o.name}"]) for o in model.outputs if f"{name}.{o.name}" in write
                )
            )
            plans.append(StepPlan(name=name, model=model.name, input_map=in_map, output_map=out_map))
        for r in routers:
            in_map = ((ROUTER_INPUT, write[r.source]),)
            out_map = tuple(sorted((out, read[c]) for out, c in r.outputs))
            plans.append(StepPlan(name=r.name, model=r.name, input_map=in_map, output_map=out_map))
        ens_inputs = tuple((i.name, Tensor(i.data_type, tuple(i.dims))) for i in p.inputs)
        ens_outputs = []
        for o in p.outputs:
            ens_outputs.append((o.name, ensemble_output(catalogue[outputs[o.name]], batching)))
        return EnsemblePlan(
            name=p.name,
            max_batch_size=mbs,
            inputs=ens_inputs,
            outputs=tuple(ens_outputs),
            steps=tuple(plans),
            routers=tuple(routers),
            fan_out=p.fan_out,
        )

    @staticmethod
    def _batched(src: str, steps: dict[str, tuple[int, Model]]) -> bool:
        """Whether a tensor carries the ensemble's batch dimension: pipeline inputs and outputs of
        batching steps do. A router copies an unbatched tensor (from a step with maxBatchSize 0) with
        maxBatchSize 0 and the tensor's full shape: Triton exempts such steps from the ensemble's batch
        size, whereas a batching router would need the full shape minus its first dimension (nothing
        at all for a rank-1 tensor: "must specify 'dims'") and would cap that dimension at the
        ensemble's maxBatchSize at run time."""
        head = src.split(".", 1)[0]
        return head == INPUTS or steps[head][1].max_batch_size > 0

    def _source_order(self, src: str, steps: dict[str, tuple[int, Model]]) -> tuple[int, str]:
        head = src.split(".", 1)[0]
        return (-1 if head == INPUTS else steps[head][0], src)

    def _router_on_gpu(self, src: str, cs: list[Consumer], steps: dict[str, tuple[int, Model]]) -> bool:
        if self.cpu_only:
            return False
        neighbours = [src.split(".", 1)[0], *(c.step for c in cs if c.step)]
        return any(inst.kind == "GPU" for s in neighbours if s in steps for inst in steps[s][1].instances)


def _norm_type(data_type: str) -> str:
    return "BYTES" if data_type == "STRING" else data_type


def plan_repository(tp: TritonPipeline, *, cpu_only: bool = False) -> RepositoryPlan:
    """Check every rule and plan the repository. Raises SpecError with all problems found."""
    spec = tp.spec
    ctx = _Ctx()
    cpu = cpu_only or spec.server.gpus == 0
    check_models(spec, ctx)
    model_names = {m.name for m in spec.models}
    pipe_names: dict[str, int] = {}
    for i, p in enumerate(spec.pipelines):
        if p.name in model_names:
            ctx.add(
                f"spec.pipelines[{i}].name",
                f"pipeline name {p.name!r} is also a model name; Triton serves both under one namespace",
            )
        elif p.name in pipe_names:
            ctx.add(f"spec.pipelines[{i}].name", f"duplicate pipeline name {p.name!r}")
        pipe_names.setdefault(p.name, i)
    if spec.autoscaling and spec.autoscaling.min_replicas > spec.autoscaling.max_replicas:
        ctx.add(
            "spec.autoscaling.minReplicas",
            f"minReplicas ({spec.autoscaling.min_replicas}) must be <= maxReplicas "
            f"({spec.autoscaling.max_replicas})",
        )
    taken = model_names | set(pipe_names)
    ensembles = []
    for i in range(len(spec.pipelines)):
        plan = _PipelineCompiler(spec, i, ctx, taken, cpu).run()
        if plan is not None:
            ensembles.append(plan)
    if ctx.problems:
        raise SpecError(ctx.problems)
    return RepositoryPlan(models=tuple(spec.models), ensembles=tuple(ensembles), cpu_only=cpu)
