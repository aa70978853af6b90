"""The compiler's data: one pipeline's resolved dataflow (`PipelineGraph`, what the rules read) and the
plan rendered into config.pbtxt files (`RepositoryPlan` and its parts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from ..errors import Problem
from ..spec import Model, Pipeline, PipelineSpec

INPUTS = "inputs"  # reference prefix for pipeline inputs: `inputs.NAME`
ROUTER_INPUT = "INPUT"  # the one input of every generated router
LATEST_VERSION = -1  # an ensemble step's model_version for "the latest the model serves"
# the native router (native_router.c): Triton's backend name and the library Triton loads for it from the
# router's version directory (libtriton_<backend>.so)
NATIVE_ROUTER_BACKEND = "tprouter"
NATIVE_ROUTER_LIBRARY = f"libtriton_{NATIVE_ROUTER_BACKEND}.so"
# in a repository rendered for a cluster (ConfigMaps hold text), this file stands where the library goes:
# the init container (tritonpipeline assemble) puts its image's library beside it
NATIVE_ROUTER_SLOT = f"{NATIVE_ROUTER_LIBRARY}.from-image"
NATIVE_ROUTER_SLOT_TEXT = (
    f"tritonpipeline assemble puts {NATIVE_ROUTER_LIBRARY} here, built for the pod's architecture and "
    "carried by the operator image\n"
).encode()
# a router's labels file (an output's labelFilename travels with the tensor it classifies): a generated file
# of this text and `MODEL/FILE`, which the repository writer (local/repository.py, in the init container
# too) makes a link to that model's file
LINK_TO_MODEL_FILE = b"tritonpipeline: a link to the model file "
# the generated open-streams gauge of Stream pipelines (open_streams_model.py, which names the gauge, the
# lease time and the count file too): the streams the client helper registered, their leases not expired
OPEN_STREAMS_MODEL = "tritonpipeline__open_streams"
OPEN_STREAMS_GAUGE = "tritonpipeline_open_streams"
OPEN_STREAMS_LEASE_SECONDS = 15  # a registered stream not renewed for this long counts no more
OPEN_STREAMS_FILE = "open-streams"  # "COUNT UNIX_SECONDS", in the pod's drain directory


def parse_ref(ref: str) -> tuple[str, str] | None:
    """`inputs.NAME` or `STEP.TENSOR` as (head, tail); None when it is neither."""
    head, dot, tail = ref.partition(".")
    if not dot or not head or not tail:
        return None
    return head, tail


def producer(ref: str) -> str:
    """The head of a resolved reference: a step name, or INPUTS for a pipeline input."""
    return ref.split(".", 1)[0]


def is_input_ref(ref: str) -> bool:
    return ref.startswith(INPUTS + ".")


def first_index(names: Iterable[str]) -> dict[str, int]:
    """Each name -> the position of its first occurrence (in order of first occurrence)."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        first.setdefault(name, i)
    return first


def full_dims(dims: tuple[int, ...] | list[int], batching: bool) -> tuple[int, ...]:
    """A declared shape with the batch dimension (-1) in front when its owner batches."""
    return (-1, *dims) if batching else tuple(dims)


@dataclass(frozen=True)
class Tensor:
    """Type and full shape (batch dimension included when the owner batches) of one dataflow edge."""

    data_type: str
    full_dims: tuple[int, ...]
    optional: bool = False  # an optional pipeline input: requests may leave it out


@dataclass(frozen=True)
class Consumer:
    """Where a tensor goes: a model input of a step, or a pipeline output."""

    step: str | None  # None: a pipeline output
    name: str  # model input name, or pipeline output name

    @property
    def label(self) -> str:
        return f"{self.step}.{self.name}" if self.step else f"outputs.{self.name}"


@dataclass(frozen=True)
class Guard:
    """When a step runs: its `when`, or its case of a switch (which also needs none of the cases before
    it to hold; a switch's default has no operator, only those). Equal guards make one branch."""

    tensor: str  # the reference the condition reads, as written
    operator: str | None  # equals, in, greaterThan, lessThan; None: a switch's default
    value: object = None  # a list of `in` as a tuple (a guard is hashable)
    unless: tuple[tuple[str, object], ...] = ()  # earlier cases of its switch: (operator, value)
    path: str = field(default="", compare=False)  # where it is declared (`...when`, `...switch[k].cases[c]`)

    @staticmethod
    def of(
        tensor: str, operator: tuple[str, object], unless: tuple[tuple[str, object], ...] = (), path: str = ""
    ) -> Guard:
        name, value = operator
        return Guard(tensor, name, tuple(value) if isinstance(value, list) else value, unless, path)

    @property
    def operator_value(self) -> tuple[str, object]:
        """(operator, value) of a case: what the cases after it must not match."""
        assert self.operator is not None
        return self.operator, self.value

    def said(self) -> str:
        """In words, for messages: `when classify.LABEL equals 0`."""
        return f"when {self.words()}"

    def words(self) -> str:
        """The condition as written, in words (status, messages): `classify.LABEL equals 0`, a switch's
        default `no case of the switch on classify.LABEL holds`."""
        if self.operator is None:
            return f"no case of the switch on {self.tensor} holds"
        return f"{self.tensor} {self.operator} {_shown(self.value)}"

    def plan(self, src: str) -> dict[str, object]:
        """What the orchestrator evaluates (compiler/orchestrator_model.py, holds_guard), `src` the
        resolved reference."""
        return {
            "tensor": src,
            "operator": self.operator,
            "value": _listed(self.value),
            "unless": [{"operator": op, "value": _listed(v)} for op, v in self.unless],
        }


def _listed(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _shown(value: object) -> str:
    return repr(_listed(value))


@dataclass(frozen=True)
class ResolvedStep:
    """A step whose name is free and whose model exists."""

    name: str
    index: int  # position in the pipeline's steps
    model: Model
    inputs: Mapping[str, str]  # model input -> reference, as written
    version: int = LATEST_VERSION  # the model version it calls


@dataclass
class PipelineGraph:
    """One pipeline's resolved dataflow, filled in by `resolve.resolve_pipeline` in rule order and read
    by every pipeline rule and by the planner. Only what resolved is recorded; what did not is a
    problem (and sets `unresolved`)."""

    spec: PipelineSpec
    index: int  # position in spec.pipelines
    problems: list[Problem] = field(default_factory=list)
    unresolved: bool = False  # a name or reference failed: "unused"/"dead" findings would be noise
    steps: dict[str, ResolvedStep] = field(default_factory=dict)  # in declaration order
    inputs: dict[str, int] = field(default_factory=dict)  # pipeline input -> its index
    max_batch_size: int = 0  # the ensemble's
    catalogue: dict[str, Tensor] = field(default_factory=dict)  # reference -> what it carries
    consumers: dict[str, list[Consumer]] = field(default_factory=dict)  # reference -> its readers
    deps: dict[str, set[str]] = field(default_factory=dict)  # step -> steps it reads from
    outputs: dict[str, str] = field(default_factory=dict)  # pipeline output -> reference
    order: list[str] | None = None  # steps in dataflow order; None while unknown or on a cycle
    guards: dict[str, Guard] = field(default_factory=dict)  # step -> when it runs (its `when` or case)
    conditions: dict[str, str] = field(default_factory=dict)  # step -> the reference its guard reads
    merges: dict[str, list[str]] = field(default_factory=dict)  # pipeline output -> from, then orFrom

    @property
    def pipeline(self) -> Pipeline:
        return self.spec.pipelines[self.index]

    @property
    def path(self) -> str:
        return f"spec.pipelines[{self.index}]"

    def step_path(self, j: int) -> str:
        return f"{self.path}.steps[{j}]"

    @cached_property
    def models(self) -> dict[str, Model]:
        return {m.name: m for m in self.spec.models}

    @cached_property
    def first_step(self) -> dict[str, int]:
        """Every declared step name (valid or not) -> where it is first declared."""
        return first_index(s.step_name for s in self.pipeline.steps)

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    def when(self, step: str) -> Guard | None:
        """The guard of a resolved step: its `when` or its case of a switch (None: it runs for every
        request)."""
        return self.guards.get(step)

    @property
    def conditional(self) -> bool:
        """Whether a step has a `when` or the pipeline a switch (then an orchestrator serves it)."""
        return bool(self.pipeline.switch) or any(s.when is not None for s in self.pipeline.steps)

    def owner_batches(self, ref: str) -> bool:
        """Whether the producer of a resolved reference batches (its tensor has the batch dimension)."""
        head = producer(ref)
        return self.batching if head == INPUTS else self.steps[head].model.max_batch_size > 0

    def per_request(self, ref: str) -> tuple[int, ...]:
        """A resolved tensor's shape for one request: without the batch dimension when its owner batches."""
        dims = self.catalogue[ref].full_dims
        return dims[1:] if self.owner_batches(ref) else dims

    def route_to_sequence_step(self, start: str) -> list[str] | None:
        """The shortest route of steps from `start` (excluded from the search's goal) to a sequence-batched
        step downstream, as step names from `start` to that step; None when none is downstream."""
        readers: dict[str, list[str]] = {name: [] for name in self.steps}
        for name in sorted(self.deps, key=lambda n: self.steps[n].index):
            for dep in sorted(self.deps[name], key=lambda d: self.steps[d].index):
                readers[dep].append(name)
        parent: dict[str, str] = {}
        frontier, seen = [start], {start}
        while frontier:
            following: list[str] = []
            for name in frontier:
                for reader in readers[name]:
                    if reader in seen:
                        continue
                    seen.add(reader)
                    parent[reader] = name
                    if self.steps[reader].model.sequence_batching is not None:
                        route = [reader]
                        while route[-1] != start:
                            route.append(parent[route[-1]])
                        return route[::-1]
                    following.append(reader)
            frontier = following
        return None

    def add(self, found: Iterable[Problem], *, unresolved: bool = False) -> bool:
        """Record a rule's problems; `unresolved` marks them as failed names or references."""
        before = len(self.problems)
        self.problems.extend(found)
        if len(self.problems) == before:
            return False
        self.unresolved = self.unresolved or unresolved
        return True


@dataclass(frozen=True)
class StepPlan:
    name: str
    model: str
    input_map: tuple[tuple[str, str], ...]  # (model input, ensemble tensor), sorted
    output_map: tuple[tuple[str, str], ...]  # (model output, ensemble tensor), sorted
    version: int = LATEST_VERSION  # the model version it calls (Triton's model_version)


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
    optional: bool = False  # copies an optional pipeline input: writes nothing when a request leaves it out
    # the one GPU it runs on when it feeds a sequence step and the pod has several (plan._pinned_gpu): a GPU
    # group would run one instance per GPU, letting a sequence's requests overtake each other
    # (rules.UNORDERED_BEFORE_SEQUENCE)
    pinned_gpu: int | None = None
    # (labelFilename, its model): the labels of the step output it copies, for the outputs that are
    # pipeline outputs (a client asking those for classes gets the names, as from the model itself)
    labels: tuple[str, str] | None = None


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
class PartPlan:
    """A plain ensemble the orchestrator calls: the unconditional part, or one branch (`when`: the
    guard). Its inputs and outputs are named by reference."""

    model: str
    inputs: tuple[str, ...]  # `inputs.NAME` or `STEP.TENSOR`
    outputs: tuple[str, ...]  # `STEP.TENSOR`
    when: tuple[str, Guard] | None = None  # a branch's: (the reference its condition reads, its guard)
    streams: bool = False  # holds a decoupled step: called once per request, its responses streamed
    sequence: bool = False  # holds a sequence-batched step: called once per request, with its sequence


@dataclass(frozen=True)
class MergedOutput:
    """A pipeline output of a conditional pipeline: its sources, first written wins, then its default."""

    name: str
    sources: tuple[str, ...]
    tensor: Tensor  # as the orchestrator declares it (dims relative to its max_batch_size)
    default: object = None
    # the shape a default fills: one request's (without the batch dimension), and whether a request's
    # rows (the first dimension of its inputs) come in front, as its first source's model batches
    fill_dims: tuple[int, ...] = ()
    fill_rows: bool = False


@dataclass(frozen=True)
class OrchestratorPlan:
    """A pipeline with conditions: a generated Python BLS model (orchestrator_model.py) named after the
    pipeline, evaluating each condition per request and calling the plain ensembles of its parts, each
    once per batch with the requests that take it."""

    name: str
    max_batch_size: int
    inputs: tuple[tuple[str, Tensor], ...]  # the pipeline's inputs, as an ensemble would declare them
    outputs: tuple[MergedOutput, ...]
    head: PartPlan | None  # the unconditional steps (None: the conditions read pipeline inputs only)
    branches: tuple[PartPlan, ...]
    # a branch streams: the orchestrator is decoupled (compiler/orchestrator_model.py, stream)
    decoupled: bool = False
    # a part holds a sequence step: the orchestrator is sequence-batched, its sequences idle out after the
    # longest idle time of those steps (0: not sequence-batched)
    sequence_idle_us: int = 0
    # the native switch's model name (compiler/switch_plan.py), reserved whichever backend serves it
    switch: str = ""
    # the spec's `speculative`: where the native switch serves it, every branch runs beside the head
    speculative: bool = False

    @property
    def parts(self) -> tuple[PartPlan, ...]:
        """The head (where there is one), then the branches: the order the orchestrator calls them."""
        return (*((self.head,) if self.head else ()), *self.branches)


@dataclass(frozen=True)
class RepositoryPlan:
    models: tuple[Model, ...]
    ensembles: tuple[EnsemblePlan, ...]
    cpu_only: bool
    orchestrators: tuple[OrchestratorPlan, ...] = ()

    @property
    def routers(self) -> tuple[RouterPlan, ...]:
        return tuple(r for e in self.ensembles for r in e.routers)
