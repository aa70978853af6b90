"""An ensemble's config as a pipeline: its inputs, its steps (the ensembles it calls inlined), their
dataflow and its outputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..compiler.plan import ensemble_output
from ..compiler.plan_types import INPUTS, LATEST_VERSION, Tensor, full_dims
from ..spec import (
    Pipeline,
    PipelineInput,
)
from .findings import (
    DUPLICATE_OUTPUT,
    ENSEMBLE_FIELD,
    ENSEMBLE_OUTPUT_DECLARED,
    ENSEMBLE_REFUSES,
    ERROR,
    NESTED_CYCLE,
    NESTED_VERSION,
    NOT_CARRIED,
    PRODUCED_INPUT,
    TWO_PRODUCERS,
    UNKNOWN_STEP_MODEL,
    UNPRODUCED_OUTPUT,
    UNPRODUCED_TENSOR,
)
from .reading import Reading, copy_rows, has_field, map_key, spec_order
from .tables import PIPELINE_INPUT_FIELDS, ints, spec_data_type


def step_names(models: Sequence[str]) -> list[str]:
    """Each step's name: its model's, and `model_2`, `model_3`... for later calls of the same model; a
    '.' in a model's name becomes '_' (a step's name holds none: a reference is STEP.TENSOR)."""
    taken = {INPUTS, *models}
    names: list[str] = []
    for model in models:
        base = model.replace(".", "_")
        if base not in names and base != INPUTS and (base == model or base not in taken):
            names.append(base)
            taken.add(base)
            continue
        n = 2
        while True:
            suffix = f"_{n}"
            candidate = base[: 64 - len(suffix)] + suffix
            if candidate not in taken:
                break
            n += 1
        taken.add(candidate)
        names.append(candidate)
    return names


@dataclass(frozen=True)
class _FlatStep:
    """One step of an ensemble with the ensembles it calls inlined: a step of its own, or a step of a
    nested ensemble, its maps rewritten into the outer ensemble's tensors. `path` is the outer config's
    step that runs it (for an inlined step, the call of the nested ensemble)."""

    step: Any
    path: str


def _flat_steps(cfg: Any, ensembles: Mapping[str, Any], r: Reading) -> list[_FlatStep]:
    """cfg's steps, each call of another ensemble replaced by that ensemble's steps (recursively), as
    Triton runs them: the nested ensemble's inputs are the tensors the call maps to them, its outputs the
    tensors the call maps them to, and its inner tensors get names of their own. Inlined steps that feed
    nothing the call maps are left out (their answers went nowhere)."""
    flat: list[_FlatStep] = []
    for j, step in enumerate(cfg.ensemble_scheduling.step):
        path = f"ensemble_scheduling.step[{j}]"
        model = str(step.model_name)
        if model not in ensembles:
            flat.append(_FlatStep(step, path))
            continue
        inner = _inlined(step, ensembles, (str(cfg.name), model), f"{j}/", r, path)
        flat += [_FlatStep(s, path) for s in (inner if inner is not None else [step])]
    return flat


def _inlined(
    call: Any, ensembles: Mapping[str, Any], route: tuple[str, ...], prefix: str, r: Reading, path: str
) -> list[Any] | None:
    """The steps of ensemble route[-1] as called by `call`, maps rewritten (see _flat_steps); None, and
    an ERROR, when it calls itself (the call then stays, so that its outputs raise no errors of their own)."""
    nested = ensembles[route[-1]]
    if route[-1] in route[:-1]:
        cycle = route[route.index(route[-1]) :]
        r.add(ERROR, f"{path}.model_name", NESTED_CYCLE.format(model=route[-1], route=" -> ".join(cycle)))
        return None
    given = dict(call.input_map)  # nested input -> outer tensor
    wanted = dict(call.output_map)  # nested output -> outer tensor

    def outer(tensor: str) -> str:
        if tensor in given:
            return str(given[tensor])
        return str(wanted.get(tensor, f"{prefix}{tensor}"))

    known = {str(t.name) for t in nested.input}
    steps: list[Any] = []
    for k, step in enumerate(nested.ensemble_scheduling.step):
        copy = type(step)()
        copy.CopyFrom(step)
        copy.ClearField("input_map")
        copy.ClearField("output_map")
        for key, tensor in step.input_map.items():
            if tensor not in known or tensor in given:  # a nested input the call leaves out: unmapped
                copy.input_map[key] = outer(str(tensor))
        for key, tensor in step.output_map.items():
            copy.output_map[key] = outer(str(tensor))
        model = str(step.model_name)
        if model in ensembles:
            inner = _inlined(copy, ensembles, (*route, model), f"{prefix}{k}/", r, path)
            steps += inner if inner is not None else [copy]
        else:
            steps.append(copy)
    return _feeding(steps, set(wanted.values()))


def _feeding(steps: list[Any], results: set[str]) -> list[Any]:
    """The steps whose outputs reach `results`, directly or through other steps (in any listed order)."""
    needed, keep = set(results), [False] * len(steps)
    changed = True
    while changed:
        changed = False
        for i, step in enumerate(steps):
            if not keep[i] and needed & set(step.output_map.values()):
                keep[i] = changed = True
                needed |= set(step.input_map.values())
    return [step for i, step in enumerate(steps) if keep[i]]


def pipeline_entry(
    cfg: Any, r: Reading, models: Mapping[str, Any], ensembles: Mapping[str, Any], unreadable: set[str]
) -> dict[str, Any]:
    """The spec's pipeline of one ensemble config, the ensembles it calls inlined (_flat_steps)."""
    entry: dict[str, Any] = {"name": cfg.name}
    r.take("name", "name")
    r.take("platform")
    for refused, words in ENSEMBLE_REFUSES.items():
        if has_field(cfg, refused):
            r.take(refused)
            r.add(ERROR, refused, ENSEMBLE_FIELD.format(field=refused, words=words.format(name=cfg.name)))
    entry["maxBatchSize"] = int(cfg.max_batch_size)
    r.take("max_batch_size", "maxBatchSize")
    entry["inputs"] = [
        spec_order(
            copy_rows(r, t, PIPELINE_INPUT_FIELDS, PipelineInput, f"input[{i}].", f"inputs[{i}]"),
            PipelineInput,
        )
        for i, t in enumerate(cfg.input)
    ]
    for i in range(len(cfg.input)):
        r.origin[f"inputs[{i}]"] = f"input[{i}]"
    inputs = {str(t.name) for t in cfg.input}
    r.see("ensemble_scheduling")
    for j, call in enumerate(cfg.ensemble_scheduling.step):
        path = f"ensemble_scheduling.step[{j}]"
        r.take(f"{path}.model_name")
        r.take(f"{path}.input_map")
        r.take(f"{path}.output_map")
        r.take(f"{path}.model_version")
        _step_model(call, path, r, models, ensembles, unreadable)
        if call.model_version != LATEST_VERSION and call.model_name in ensembles:
            message = NESTED_VERSION.format(version=call.model_version, model=call.model_name)
            r.add(NOT_CARRIED, f"{path}.model_version", message)
    steps = _flat_steps(cfg, ensembles, r)
    names = step_names([str(s.step.model_name) for s in steps])
    producers: dict[str, tuple[int, str]] = {}  # ensemble tensor -> (step index, model output)
    for j, flat in enumerate(steps):
        r.see(flat.path, f"steps[{j}]")
        r.origin[f"steps[{j}].model"] = f"{flat.path}.model_name"
        for out, tensor in sorted(flat.step.output_map.items()):
            where = f"{flat.path}.output_map{map_key(out)}"
            if tensor in inputs:
                r.add(ERROR, where, PRODUCED_INPUT.format(tensor=tensor))
            elif tensor in producers:
                first = steps[producers[tensor][0]].path
                r.add(ERROR, where, TWO_PRODUCERS.format(tensor=tensor, first=first))
            else:
                producers[tensor] = (j, str(out))
    entry["steps"] = [_step(flat, j, names, inputs, producers, r, models) for j, flat in enumerate(steps)]
    entry["outputs"] = _pipeline_outputs(cfg, steps, names, producers, r, models)
    return spec_order(entry, Pipeline)


def _step_model(
    step: Any,
    path: str,
    r: Reading,
    models: Mapping[str, Any],
    ensembles: Mapping[str, Any],
    unreadable: set[str],
) -> None:
    model = str(step.model_name)
    if model not in models and model not in ensembles and model not in unreadable:
        known = ", ".join(sorted(models)) or "none"  # an unreadable config has its own error
        r.add(ERROR, f"{path}.model_name", UNKNOWN_STEP_MODEL.format(model=model, known=known))


def _step(
    flat: _FlatStep,
    j: int,
    names: list[str],
    inputs: set[str],
    producers: Mapping[str, tuple[int, str]],
    r: Reading,
    models: Mapping[str, Any],
) -> dict[str, Any]:
    step, path = flat.step, flat.path
    out: dict[str, Any] = {}
    if names[j] != step.model_name:
        out["name"] = names[j]
    out["model"] = str(step.model_name)
    if step.model_version != LATEST_VERSION:
        out["version"] = int(step.model_version)
        r.origin[f"steps[{j}].version"] = f"{path}.model_version"
    model = models.get(str(step.model_name))
    order = {str(t.name): i for i, t in enumerate(model.input)} if model is not None else {}
    mapped: dict[str, str] = {}
    for key in sorted(step.input_map, key=lambda k: (order.get(k, len(order)), k)):
        tensor = step.input_map[key]
        where = f"{path}.input_map{map_key(key)}"
        if tensor in inputs:
            mapped[key] = f"{INPUTS}.{tensor}"
        elif tensor in producers:
            k, output = producers[tensor]
            mapped[key] = f"{names[k]}.{output}"
        else:
            r.add(ERROR, where, UNPRODUCED_TENSOR.format(tensor=tensor))
            continue
        r.origin[f"steps[{j}].inputs.{key}"] = where
    out["inputs"] = mapped
    return out


def _pipeline_outputs(
    cfg: Any,
    steps: Sequence[_FlatStep],
    names: list[str],
    producers: Mapping[str, tuple[int, str]],
    r: Reading,
    models: Mapping[str, Any],
) -> list[dict[str, str]]:
    outputs: list[dict[str, str]] = []
    first: dict[str, int] = {}
    batching = cfg.max_batch_size > 0
    for i, o in enumerate(cfg.output):
        path = f"output[{i}]"
        name = str(o.name)
        if name in first:
            r.take(path)
            r.add(NOT_CARRIED, path, DUPLICATE_OUTPUT.format(name=name, first=first[name]))
            continue
        first[name] = i
        r.take(f"{path}.name")
        if name not in producers:
            r.add(ERROR, f"{path}.name", UNPRODUCED_OUTPUT.format(tensor=name))
            continue
        j, output = producers[name]
        k = len(outputs)
        outputs.append({"name": name, "from": f"{names[j]}.{output}"})
        r.origin[f"outputs[{k}]"] = path
        r.origin[f"outputs[{k}].name"] = f"{path}.name"
        r.origin[f"outputs[{k}].from"] = f"{steps[j].path}.output_map{map_key(output)}"
        model = models.get(str(steps[j].step.model_name))
        _declared_output(o, path, model, f"{names[j]}.{output}", batching, r)
    return outputs


def _declared_output(o: Any, path: str, model: Any, source: str, batching: bool, r: Reading) -> None:
    """An ensemble output's data_type, dims and reshape: the render derives them from the producer; a
    declaration that says the same is carried, one that differs is reported."""
    produced = next((t for t in model.output if t.name == source.split(".", 1)[1]), None) if model else None
    if produced is None:  # the compiler names the missing output (a warning)
        r.take(path)
        return
    derived = ensemble_output(
        Tensor(spec_data_type(produced.data_type), full_dims(ints(produced.dims), model.max_batch_size > 0)),
        batching,
    )
    declared_type = spec_data_type(o.data_type)
    if declared_type == derived.data_type:
        r.take(f"{path}.data_type")
    else:
        r.take(f"{path}.data_type")
        r.add(
            NOT_CARRIED,
            f"{path}.data_type",
            ENSEMBLE_OUTPUT_DECLARED.format(
                value=f"TYPE_{declared_type}",
                what="data type",
                source=source,
                derived=f"TYPE_{derived.data_type}",
            ),
        )
    reshape = getattr(derived, "reshape", None)
    declared_reshape = tuple(o.reshape.shape) if o.HasField("reshape") else None
    r.take(f"{path}.dims")
    r.take(f"{path}.reshape")
    if tuple(o.dims) == tuple(derived.full_dims) and declared_reshape == reshape:
        return
    declared = f"dims {ints(o.dims)}" + (
        "" if declared_reshape is None else f" reshape {list(declared_reshape)}"
    )
    wanted = f"dims {list(derived.full_dims)}" + ("" if reshape is None else f" reshape {list(reshape)}")
    r.add(
        NOT_CARRIED,
        f"{path}.dims",
        ENSEMBLE_OUTPUT_DECLARED.format(value=declared, what="shape", source=source, derived=wanted),
    )
