"""The native form of a conditional pipeline (pure): one ensemble named after the pipeline, its
unconditional steps (the head's, flattened in) and then the switch, a step on the native router's
backend (native_router.c, its second half) that evaluates each branch's condition per request, calls
the ensemble of each branch taken in-process and answers with the pipeline's outputs.

Why not the branches' steps in the ensemble itself: Triton's ensemble scheduler cannot skip a step.
A step whose input was not written is still called, without that input (ConsumeResponse in
ensemble_scheduler.cc puts an empty placeholder for each output a step leaves out): a model with a
required input then fails the whole request ("expected 1 inputs but got 0 inputs"). A decoupled step
that sends no response would skip its consumers, but makes the ensemble decoupled, which HTTP
clients cannot call. What the ensemble does allow, and the switch relies on: an ensemble output no
step wrote is left out of the response.

A speculative pipeline (the spec's `speculative`) has its branches' steps in that ensemble too, beside
the head's: every branch runs for every request, and the switch, calling none, serves each output from the
branches taken only. The latency is a plain ensemble's (no step waits for the condition), the compute that
of every branch.

Where the plan has something the native switch does not serve (parts batching differently from the
pipeline, a streaming branch or a part holding a sequence step: orchestrator_model.py streams those and
passes sequences on), `native_switch` gives None and the Python orchestrator serves the pipeline.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .plan_types import INPUTS, EnsemblePlan, MergedOutput, OrchestratorPlan, StepPlan, Tensor

SWITCH_PARAMETER = "tritonpipeline.switch"  # the switch's plan (native_router.c reads it by this name)
# the switch's counter of the rows taking each speculative branch, labelled `model` (its ensemble, never
# called): native_router.c's TAKEN_METRIC; render/triton_metrics.py counts it as the branch's inferences
BRANCH_TAKEN_COUNTER = "tritonpipeline_branch_taken"
# TRITONSERVER_DataType (tritonserver.h), by the spec's data type: a default's type in the plan
SERVER_TYPES = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "STRING": 13,
    "BF16": 14,
}
# one element of a default, packed little-endian (BYTES: its length, then its bytes)
PACKED = {
    "BOOL": "?",
    "UINT8": "B",
    "UINT16": "H",
    "UINT32": "I",
    "UINT64": "Q",
    "INT8": "b",
    "INT16": "h",
    "INT32": "i",
    "INT64": "q",
    "FP16": "e",
    "FP32": "f",
    "FP64": "d",
}
OPERATORS = {"equals": "E", "in": "I", "greaterThan": "G", "lessThan": "L", None: "D"}


@dataclass(frozen=True)
class SwitchPlan:
    """The pipeline's ensemble (head steps, then the switch) and the switch model it calls."""

    ensemble: EnsemblePlan
    name: str
    max_batch_size: int
    inputs: tuple[tuple[str, Tensor], ...]  # named by reference, every one optional
    outputs: tuple[tuple[str, Tensor], ...]  # the pipeline outputs it serves
    plan: str  # SWITCH_PARAMETER's value


def native_switch(orch: OrchestratorPlan, ensembles: Mapping[str, EnsemblePlan]) -> SwitchPlan | None:
    """The switch form of a conditional pipeline, or None where only the Python orchestrator serves it."""
    if orch.decoupled or orch.sequence_idle_us or any(p.streams or p.sequence for p in orch.parts):
        return None
    head = ensembles[orch.head.model] if orch.head is not None else None
    branches = [ensembles[b.model] for b in orch.branches]
    if any(p.max_batch_size != orch.max_batch_size for p in (*branches, *([head] if head else []))):
        return None
    # the ensemble's tensors: pipeline inputs by their names, a head output that is exactly one pipeline
    # output by that output's name (no copy), every other by its reference
    name_of = {f"{INPUTS}.{name}": name for name, _ in orch.inputs}
    single = Counter(o.sources[0] for o in orch.outputs if len(o.sources) == 1)
    head_outputs = dict(head.outputs) if head else {}
    renamed_outputs = set()
    for o in orch.outputs:
        ref = o.sources[0]
        if len(o.sources) == 1 and ref in head_outputs and single[ref] == 1 and o.default is None:
            name_of[ref] = o.name
            renamed_outputs.add(o.name)
    # speculative: the branches' steps run in the ensemble beside the head's, for every request
    beside = [*([head] if head else []), *(branches if orch.speculative else [])]
    tensors = {t for e in beside for s in e.steps for _, t in (*s.input_map, *s.output_map)}
    if tensors & (set(name_of.values()) - set(name_of)):
        return None  # a pipeline name taken by a tensor of the head: the Python orchestrator serves it

    def named(ref: str) -> str:
        return name_of.get(ref, ref)

    catalogue: dict[str, Tensor] = {f"{INPUTS}.{name}": t for name, t in orch.inputs}
    catalogue.update(head_outputs)
    for b in branches:
        catalogue.update(dict(b.inputs))
        catalogue.update(dict(b.outputs))
    served = [o for o in orch.outputs if o.name not in renamed_outputs]
    reads = {b.when[0] for b in orch.branches if b.when is not None}
    if orch.speculative:  # every source is a tensor of the ensemble; a branch's, kept where it is taken
        reads |= {ref for o in served for ref in o.sources if ref in catalogue}
    else:  # the switch passes its branches what they read, and serves their outputs from their answers
        reads |= {ref for b in orch.branches for ref in b.inputs}
        reads |= {
            ref for o in served for ref in o.sources if ref in catalogue and not _branch_output(ref, orch)
        }
    inputs = tuple((ref, replace(catalogue[ref], optional=True)) for ref in sorted(reads))
    outputs = tuple((o.name, o.tensor) for o in served)
    step = StepPlan(
        name=orch.switch,
        model=orch.switch,
        input_map=tuple((ref, named(ref)) for ref, _ in inputs),
        output_map=tuple(sorted((name, name) for name, _ in outputs)),
    )
    flattened = tuple(
        replace(
            s,
            input_map=tuple((k, named(t)) for k, t in s.input_map),
            output_map=tuple((k, named(t)) for k, t in s.output_map),
        )
        for e in beside
        for s in e.steps
    )
    ensemble = EnsemblePlan(
        name=orch.name,
        max_batch_size=orch.max_batch_size,
        inputs=orch.inputs,
        outputs=tuple((o.name, o.tensor) for o in orch.outputs),
        steps=(*flattened, step),
        routers=(),  # the parts' are their ensembles': rendered there, run by these steps too
        fan_out=head.fan_out if head else "shared",
    )
    return SwitchPlan(
        ensemble=ensemble,
        name=orch.switch,
        max_batch_size=orch.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        plan=switch_text(orch, served),
    )


def _branch_output(ref: str, orch: OrchestratorPlan) -> bool:
    return any(ref in b.outputs for b in orch.branches)


def _hex(text: str) -> str:
    return text.encode().hex()


def _value(value: object) -> str:
    if isinstance(value, bool):
        return f"b{int(value)}"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        return f"f{value!r}"
    return f"s{_hex(str(value))}"


def _comparison(operator: str | None, value: object) -> str:
    values = value if isinstance(value, tuple | list) else () if operator is None else (value,)
    return " ".join([OPERATORS[operator], *(_value(v) for v in values)])


def _element(data_type: str, value: object) -> bytes:
    if data_type in ("BYTES", "STRING"):
        raw = str(value).encode()
        return struct.pack("<I", len(raw)) + raw
    return struct.pack("<" + PACKED[data_type], value)


def switch_text(orch: OrchestratorPlan, served: list[MergedOutput]) -> str:
    """The switch's plan, in the records native_router.c reads (its comment on the switch says them)."""
    records: list[str] = []
    for b in orch.branches:
        assert b.when is not None
        ref, guard = b.when
        records.append(f"B {_hex(b.model)}")
        if orch.speculative:
            records.append("S")
        records.append(f"W {_hex(ref)} {_comparison(guard.operator, guard.value)}")
        records += [f"U {_comparison(op, value)}" for op, value in guard.unless]
        records += [] if orch.speculative else [f"I {_hex(r)}" for r in b.inputs]
        records += [f"O {_hex(r)}" for r in b.outputs]
    for o in served:
        records.append(" ".join(["R", _hex(o.name), *(_hex(s) for s in o.sources)]))
        if o.default is not None:
            dims = ",".join(str(d) for d in o.fill_dims) or "-"
            element = _element(o.tensor.data_type, o.default).hex()
            records.append(f"F {SERVER_TYPES[o.tensor.data_type]} {int(o.fill_rows)} {dims} {element}")
    return ";".join(records)
