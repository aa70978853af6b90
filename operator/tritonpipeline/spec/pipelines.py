"""spec.pipelines[]: the declared graph, each compiled into one ensemble."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    model_validator,
)

from .base import (
    MAX_BATCH_SIZE,
    MAX_INTEGER,
    MAX_STEPS,
    MAX_TENSORS,
    DataType,
    Dims,
    ModelName,
    Name,
    TensorName,
    _Base,
)

# a condition's value, a merged output's default: one scalar as YAML writes it (the CRD admits any scalar,
# the compiler checks it against the tensor's data type)
Scalar = bool | int | float | str
MAX_CHOICES = 64  # the values of one `in`
ONE_OPERATOR = "a condition takes exactly one operator: equals, in, greaterThan or lessThan"
# a threshold: a number the CRD can state exactly (the apiserver keeps a bound as a float64)
Threshold = Annotated[int | float, Field(ge=-MAX_INTEGER, le=MAX_INTEGER)]


class _Operators(_Base):
    """One comparison of a per-request scalar: exactly one of the four operators."""

    equals: Scalar | None = Field(default=None, description="Holds when the tensor equals this value.")
    in_: Annotated[list[Scalar], Field(min_length=1, max_length=MAX_CHOICES)] | None = Field(
        default=None, alias="in", description="Holds when the tensor equals one of these values."
    )
    greater_than: Threshold | None = Field(
        default=None, description="Holds when the tensor is greater than this number."
    )
    less_than: Threshold | None = Field(
        default=None, description="Holds when the tensor is less than this number."
    )

    @model_validator(mode="after")
    def _one_operator(self) -> _Operators:
        # not a Rule: the CRD admits any scalar in `equals` and `in` (nodes without a type), which CEL
        # cannot read, so only the spec checks this
        if sum(v is not None for v in (self.equals, self.in_, self.greater_than, self.less_than)) != 1:
            raise ValueError(ONE_OPERATOR)
        return self

    @property
    def operator(self) -> tuple[str, Scalar | list[Scalar]]:
        """(the operator as the spec names it, its value)."""
        for name, value in (
            ("equals", self.equals),
            ("in", self.in_),
            ("greaterThan", self.greater_than),
            ("lessThan", self.less_than),
        ):
            if value is not None:
                return name, value
        raise ValueError(ONE_OPERATOR)  # _one_operator refuses it first


class Condition(_Operators):
    """When a step runs: `tensor`, a per-request scalar (a pipeline input or an unconditional step's
    output, dims [1]), compared with one operator. `equals` and `in` take integer, boolean and string
    tensors; `greaterThan` and `lessThan` numbers (integer or floating point). For example
    `when: {tensor: classify.LABEL, in: [1, 2]}`. Every step that reads a conditional step's output
    carries the same condition (a branch); the pipeline's outputs written only by skipped steps are left
    out of the response, unless the output declares `orFrom` (other sources, first written wins) or a
    `default`."""

    tensor: str = Field(description="`inputs.NAME` or `STEP.TENSOR`: a scalar per request, dims [1].")


class Case(_Operators):
    """One case of a switch: its operator (as in a step's `when`) and the steps it runs."""

    steps: Annotated[list[Name], Field(min_length=1, max_length=MAX_STEPS)] = Field(
        description="Names of steps (of the pipeline's `steps`) run when this case is the first that holds."
    )


class Switch(_Base):
    """Exactly one branch per request: the first case whose comparison holds runs its steps, else the
    `default` steps. The steps are declared in the pipeline's `steps` (without `when`) and named here,
    for example `switch: [{tensor: classify.LABEL, cases: [{equals: 0, steps: [small]}, {in: [1, 2],
    steps: [large, score]}], default: [fallback]}]`."""

    tensor: str = Field(description="`inputs.NAME` or `STEP.TENSOR`: a scalar per request, dims [1].")
    cases: Annotated[list[Case], Field(min_length=1, max_length=MAX_STEPS)] = Field(
        description="Tried in order; the first that holds is the request's branch."
    )
    default: Annotated[list[Name], Field(max_length=MAX_STEPS)] = Field(
        default=[], description="Names of the steps that run when no case holds (none: nothing runs)."
    )


class StepSpec(_Base):
    """One model call of a pipeline. With `when: {tensor: classify.LABEL, equals: 0}` it runs only for
    the requests whose condition holds (or name it in a case of the pipeline's `switch`, for exactly one
    branch per request). The steps sharing a condition are a branch; a step reading a branch's output is
    in that branch. A pipeline output whose sources (`from`, then `orFrom`, first written wins) all
    were skipped is left out of the response, or takes its `default`. docs/concepts/conditions.md."""

    name: Name | None = Field(
        default=None,
        description="Step name; defaults to the model name (needed when that holds a `.`: a reference "
        "is `STEP.TENSOR`).",
    )
    model: ModelName = Field(description="A model from `spec.models`.")
    version: Annotated[int, Field(ge=1, le=MAX_INTEGER)] | None = Field(
        default=None,
        description="The model version the step calls (Triton's `model_version`); default: the latest "
        "version the model serves. The model's `versionPolicy` must serve it: Triton refuses the ensemble "
        "otherwise.",
    )
    inputs: dict[str, str] = Field(
        default={},
        description="Model input -> `inputs.NAME` or `STEP.TENSOR`; every required input exactly once.",
    )
    when: Condition | None = Field(
        default=None,
        description="Run the step only for the requests whose condition holds (a branch: the steps "
        "reading its outputs carry the same `when`). A pipeline with conditions is served by a generated "
        "orchestrator model calling plain ensembles of its unconditional part and of each branch.",
    )

    @property
    def step_name(self) -> str:
        return self.name or self.model


class PipelineInput(_Base):
    name: TensorName = Field(description="Tensor name.")
    data_type: DataType = Field(description="Triton data type.")
    dims: Dims = Field(description="Shape (without the batch dimension when the pipeline batches).")
    optional: bool = Field(
        default=False,
        description="Clients may leave it out; every step input it feeds must then be optional too.",
    )


class PipelineOutput(_Base):
    name: TensorName = Field(description="Tensor name.")
    source: str = Field(alias="from", description="`STEP.TENSOR` that produces it.")
    or_from: Annotated[list[str], Field(max_length=MAX_STEPS)] = Field(
        default=[],
        description="Where branches meet: more `STEP.TENSOR` sources, tried in order after `from` when "
        "their step was skipped by its condition (first written wins). An output none of whose sources "
        "ran is left out of the response, unless it has a `default`.",
    )
    default: Scalar | None = Field(
        default=None,
        description="The value an output of conditional steps takes (every element) when none of its "
        "sources ran; its dims must be fixed sizes.",
    )


class Pipeline(_Base):
    name: Name = Field(description="Ensemble name.")
    inputs: Annotated[list[PipelineInput], Field(min_length=1, max_length=MAX_TENSORS)] = Field(
        description="Ensemble inputs; each must be used."
    )
    steps: Annotated[list[StepSpec], Field(min_length=1, max_length=MAX_STEPS)] = Field(
        description="The DAG: one step per model call."
    )
    outputs: Annotated[list[PipelineOutput], Field(min_length=1, max_length=MAX_TENSORS)] = Field(
        description="Ensemble outputs."
    )
    fan_out: Literal["router", "shared"] = Field(
        default="router",
        description="`router`: insert a router model per fanned-out tensor; `shared`: one tensor, many "
        "consumers.",
    )
    max_batch_size: Annotated[int, Field(ge=0, le=MAX_BATCH_SIZE)] | None = Field(
        default=None,
        description="Ensemble max batch size; default: the smallest of its batching steps' (0 if none "
        "batches).",
    )
    switch: Annotated[list[Switch], Field(max_length=MAX_STEPS)] = Field(
        default=[],
        description="Exclusive branches: each switch sends a request to the steps of its first case that "
        "holds, or of its `default` (the steps are declared in `steps` and named here).",
    )
    speculative: bool = Field(
        default=False,
        description="Run every branch beside the steps without a condition, for every request, and answer "
        "with the outputs of the branches taken: a plain ensemble's latency at the compute of all branches. "
        "For pipelines with conditions whose branches hold no sequence-batched or decoupled step; honoured "
        "where the native switch serves the pipeline (the Python orchestrator waits for the condition).",
    )
