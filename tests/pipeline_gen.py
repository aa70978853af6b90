"""Seeded generator of random TritonPipeline specs for the "valid means Triton loads it" property.

Test scaffolding. Every step gets its own model signature (deduplicated by content, so equal steps share
one model) served by tests/triton_models/generic_model.py, which emits each output in its declared data
type and in the concrete shape recorded in the model's `shapes` parameter.

Conventions: every tensor has a run-time shape [B, *item] (B: the request's batch size). Batching models
and batching ensembles declare `item`, the others declare [-1, *item]; each declaration replaces some
sizes with -1 on its own, so wildcards appear on producer and consumer sides. `item` may be empty only
for a tensor produced by a step that does not batch and read only by such steps (or a pipeline output):
a rank-1 tensor [B].
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any, get_args

from helpers import doc_of
from tritonpipeline.spec import DataType

# BF16 only on pipeline inputs: the Python backend cannot create BF16 tensors from numpy
STEP_TYPES = [t for t in get_args(DataType) if t != "BF16"]
INPUT_TYPES = [*STEP_TYPES, "BF16"]
ITEMS: list[tuple[int, ...]] = [(1,), (2,), (3,), (2, 3)]
BATCH = 2  # run-time batch size of every request (<= every generated maxBatchSize)
MAX_BATCH_SIZES = (4, 8)


@dataclass
class Tensor:
    ref: str  # `inputs.NAME` or `STEP.OUTPUT`
    data_type: str
    item: tuple[int, ...]
    consumers: list[str] = field(default_factory=list)  # step names


@dataclass
class Step:
    name: str
    max_batch_size: int  # 0: the step's model does not batch
    decoupled: bool
    sources: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    input_dims: dict[int, list[int]] = field(default_factory=dict)  # declared dims overrides (near misses)

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0


@dataclass
class Generated:
    """One pipeline, its models, and what a request and its response look like."""

    pipeline: dict[str, Any]
    models: list[dict[str, Any]]
    request: dict[str, tuple[str, tuple[int, ...]]]  # input name -> (data type, shape)
    response: dict[str, tuple[str, tuple[int, ...]]]  # output name -> (data type, shape)
    decoupled: bool  # some step is decoupled: infer through a stream
    features: set[str] = field(default_factory=set)  # what this pipeline exercises (coverage)

    @property
    def name(self) -> str:
        return str(self.pipeline["name"])


def triton_type(data_type: str) -> str:
    return "BYTES" if data_type == "STRING" else data_type


class PipelineGenerator:
    def __init__(self, rng: random.Random, name: str, *, decoupled_rate: float = 0.12) -> None:
        self.rng = rng
        self.name = name
        self.decoupled_rate = decoupled_rate
        self.features: set[str] = set()

    def _wild(self, item: tuple[int, ...]) -> list[int]:
        dims = [-1 if self.rng.random() < 0.3 else d for d in item]
        if -1 in dims:
            self.features.add("wildcard")
        return dims

    def _declared(self, item: tuple[int, ...], batching: bool) -> list[int]:
        return self._wild(item) if batching else [-1, *self._wild(item)]

    def _spelling(self, data_type: str) -> str:
        """BYTES and STRING are one Triton type; either side may spell it either way."""
        if data_type in ("BYTES", "STRING"):
            return self.rng.choice(["BYTES", "STRING"])
        return data_type

    def structure(self) -> tuple[bool, list[Tensor], list[Step]]:
        rng = self.rng
        ens_batching = rng.random() < 0.8
        inputs = [
            Tensor(f"inputs.X{i}", rng.choice(INPUT_TYPES), rng.choice(ITEMS))
            for i in range(rng.randint(1, 2))
        ]
        steps: list[Step] = []
        available = list(inputs)
        for k in range(rng.randint(1, 3)):
            mbs = rng.choice(MAX_BATCH_SIZES) if rng.random() < 0.6 else 0
            step = Step(f"s{k}", mbs, rng.random() < self.decoupled_rate)
            fit = [t for t in available if t.item or not step.batching]  # pipeline inputs always fit
            wanted = rng.choice([1, 1, 2, 2, 3])
            chosen = [inputs[0]] if k == 0 else []
            rest = [t for t in fit if t not in chosen]
            chosen += rng.sample(rest, min(len(rest), max(0, wanted - len(chosen))))
            step.sources = chosen
            for j in range(rng.randint(1, 2)):
                empty_ok = not step.batching and rng.random() < 0.35
                item = () if empty_ok else rng.choice(ITEMS)
                step.outputs.append(Tensor(f"{step.name}.Y{j}", rng.choice(STEP_TYPES), item))
            available += step.outputs
            steps.append(step)
        for t in inputs[1:]:  # every pipeline input used
            if not any(t in s.sources for s in steps):
                steps[-1].sources.append(t)
        return ens_batching, inputs, steps

    def generate(self) -> Generated:
        return self.render(*self.structure())

    def render(
        self,
        ens_batching: bool,
        inputs: list[Tensor],
        steps: list[Step],
        exposed: list[Tensor] | None = None,
    ) -> Generated:
        """The spec of a structure: models, steps in random declaration order, and as pipeline outputs
        `exposed`, or by default every tensor no step reads plus a random quarter of the others."""
        rng = self.rng
        for s in steps:
            for t in s.sources:
                if s.name not in t.consumers:
                    t.consumers.append(s.name)
        models: dict[str, dict[str, Any]] = {}
        step_specs = []
        for s in steps:
            model = self._model(s)
            models.setdefault(model["name"], model)
            mapping = {f"I{i}": t.ref for i, t in enumerate(s.sources)}
            step_specs.append({"name": s.name, "model": model["name"], "inputs": mapping})
        rng.shuffle(step_specs)  # declaration order is free
        if exposed is None:
            exposed = [t for s in steps for t in s.outputs if not t.consumers or rng.random() < 0.25]
        outputs = [(f"O{k}", t) for k, t in enumerate(exposed)]
        batching_sizes = [s.max_batch_size for s in steps if s.batching]
        pipeline: dict[str, Any] = {
            "name": self.name,
            "inputs": [
                {
                    "name": t.ref.split(".", 1)[1],
                    "dataType": t.data_type,
                    "dims": self._declared(t.item, ens_batching),
                }
                for t in inputs
            ],
            "steps": step_specs,
            "outputs": [{"name": name, "from": t.ref} for name, t in outputs],
            "fanOut": rng.choice(["router", "shared"]),
        }
        if ens_batching and not batching_sizes:  # a batching ensemble of non-batching steps
            pipeline["maxBatchSize"] = rng.choice(MAX_BATCH_SIZES)
        elif ens_batching and rng.random() < 0.3:
            pipeline["maxBatchSize"] = min(batching_sizes)
        elif not ens_batching and batching_sizes:
            pipeline["maxBatchSize"] = 0  # a non-batching ensemble of batching steps
        request = {t.ref.split(".", 1)[1]: (t.data_type, (BATCH, *t.item)) for t in inputs}
        # every output as its producer returns it: [B, *item] (a rank-1 tensor [B] too)
        response = {name: (triton_type(t.data_type), (BATCH, *t.item)) for name, t in outputs}
        self._note(ens_batching, inputs, steps, exposed, pipeline["fanOut"])
        decoupled = any(s.decoupled for s in steps)
        return Generated(pipeline, list(models.values()), request, response, decoupled, set(self.features))

    def _note(
        self, ens_batching: bool, inputs: list[Tensor], steps: list[Step], exposed: list[Tensor], fan_out: str
    ) -> None:
        f = self.features
        f.add(f"fanOut:{fan_out}")
        f.add("batching ensemble" if ens_batching else "non-batching ensemble")
        tensors = [*inputs, *(t for s in steps for t in s.outputs)]
        f.update(f"type:{t.data_type}" for t in tensors)
        if any(len(t.consumers) + exposed.count(t) > 1 for t in tensors):
            f.add("fan-out")
        if any(len(s.sources) > 1 for s in steps):
            f.add("fan-in")
        if any(s.decoupled for s in steps):
            f.add("decoupled")
        for s in steps:
            if s.batching != ens_batching:
                f.add(
                    "non-batching step, batching ensemble"
                    if ens_batching
                    else "batching step, non-batching ensemble"
                )
        if ens_batching and any(not t.item for t in tensors if t in exposed or t.consumers):
            f.add("rank-1 tensor of a non-batching step, batching ensemble")

    def _model(self, s: Step) -> dict[str, Any]:
        shapes = {f"Y{j}": list(t.item) if s.batching else ["B", *t.item] for j, t in enumerate(s.outputs)}
        model: dict[str, Any] = {
            "backend": "python",
            "maxBatchSize": s.max_batch_size,
            "inputs": [
                {
                    "name": f"I{i}",
                    "dataType": self._spelling(t.data_type),
                    "dims": s.input_dims.get(i) or self._declared(t.item, s.batching),
                }
                for i, t in enumerate(s.sources)
            ],
            "outputs": [
                {
                    "name": f"Y{j}",
                    "dataType": self._spelling(t.data_type),
                    "dims": self._declared(t.item, s.batching),
                }
                for j, t in enumerate(s.outputs)
            ],
            "instances": [{"kind": "CPU", "count": 1}],
            "decoupled": s.decoupled,
            "parameters": {"shapes": json.dumps(shapes, sort_keys=True)},
        }
        if s.batching and self.rng.random() < 0.3:
            model["dynamicBatching"] = {"maxQueueDelayMicroseconds": 100}
        digest = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:12]
        return {"name": f"g{digest}", **model}


def document(name: str, uri: str, generated: list[Generated]) -> dict[str, Any]:
    """One TritonPipeline holding every generated pipeline (models deduplicated by name)."""
    models: dict[str, dict[str, Any]] = {}
    for g in generated:
        for m in g.models:
            models.setdefault(m["name"], m)
    return doc_of(name, list(models.values()), [g.pipeline for g in generated], uri)


# --------------------------------------------------------------------------- near misses


@dataclass
class NearMiss:
    """A generated pipeline that breaks exactly one rule: where it must be reported, and why."""

    kind: str
    generated: Generated
    path: str  # expected field path
    reason: str  # expected substring of the message


NEAR_MISS_KINDS = ("rank1-into-batching", "input-into-rank1", "decoupled-join", "decoupled-outputs")
DECOUPLED_KINDS = NEAR_MISS_KINDS[2:]


def near_miss(rng: random.Random, kind: str, name: str) -> NearMiss:
    """Class (a): a rank-1 tensor of a step without batching meets a batching shape. Class (b): tensors
    of different decoupled origins meet in a step, or in the pipeline outputs."""
    g = PipelineGenerator(rng, name, decoupled_rate=0.0)
    x = Tensor("inputs.X0", rng.choice(STEP_TYPES), rng.choice(ITEMS))

    def step(
        step_name: str,
        mbs: int,
        sources: list[Tensor],
        *,
        item: tuple[int, ...] | None = None,
        decoupled: bool = False,
    ) -> Step:
        out = Tensor(f"{step_name}.Y0", rng.choice(STEP_TYPES), rng.choice(ITEMS) if item is None else item)
        return Step(step_name, mbs, decoupled, sources, [out])

    def mbs() -> int:
        return rng.choice([0, *MAX_BATCH_SIZES])

    if kind == "rank1-into-batching":
        a = step("a", 0, [x], item=())
        b = step("b", rng.choice(MAX_BATCH_SIZES), [a.outputs[0]])
        b.input_dims[0] = [rng.choice([1, -1])]  # [-1, 1] against a's [-1]: ranks differ
        gen = g.render(True, [x], [a, b])
        return NearMiss(kind, gen, f"{_step_path(gen, 'b')}.inputs.I0", "shape mismatch")
    if kind == "input-into-rank1":
        a = step("a", 0, [x])
        a.input_dims[0] = [-1]  # a batching ensemble hands it [-1, *item]
        gen = g.render(True, [x], [a])
        return NearMiss(kind, gen, f"{_step_path(gen, 'a')}.inputs.I0", "shape mismatch")
    if kind == "decoupled-join":
        s0 = step("s0", mbs(), [x], item=x.item)
        d = step("d", mbs(), [s0.outputs[0]], item=x.item, decoupled=True)
        p = step("p", mbs(), [rng.choice([s0.outputs[0], x])], item=x.item)
        j = step("j", mbs(), [d.outputs[0], p.outputs[0]])
        gen = g.render(rng.random() < 0.8, [x], [s0, d, p, j], exposed=j.outputs)
        return NearMiss(kind, gen, f"{_step_path(gen, 'j')}.inputs", "different decoupled models")
    assert kind == "decoupled-outputs"
    d = step("d", mbs(), [x], decoupled=True)
    p = step("p", mbs(), [x])
    q = step("q", 0, [d.outputs[0]]) if rng.random() < 0.5 else None  # origin d as well
    origin = {d.outputs[0].ref: "d", p.outputs[0].ref: None}
    exposed = [d.outputs[0], p.outputs[0]]
    if q is not None:
        origin[q.outputs[0].ref] = "d"
        exposed.append(q.outputs[0])
    rng.shuffle(exposed)
    gen = g.render(rng.random() < 0.8, [x], [d, p] + ([q] if q else []), exposed=exposed)
    first = next(k for k, t in enumerate(exposed) if origin[t.ref] != origin[exposed[0].ref])
    return NearMiss(kind, gen, f"spec.pipelines[0].outputs[{first}].from", "different decoupled models")


def _step_path(gen: Generated, step_name: str) -> str:
    index = next(j for j, s in enumerate(gen.pipeline["steps"]) if s["name"] == step_name)
    return f"spec.pipelines[0].steps[{index}]"
