"""spec.pipelines[]: the declared graph, each compiled into one ensemble."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
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


class StepSpec(_Base):
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
