"""The document-wide rules (`check_spec`): pipeline and generated names, then each model's rules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ...errors import Problem
from ...spec import PipelineSpec
from ..plan_types import (
    OPEN_STREAMS_MODEL,
    first_index,
)
from . import model_rules
from .messages import DUPLICATE_PIPELINE, PIPELINE_NAMED_LIKE_MODEL, RESERVED_MODEL_NAME

# --------------------------------------------------------------------------- the document


def pipeline_name_free(spec: PipelineSpec, i: int, first: Mapping[str, int]) -> Iterator[Problem]:
    """A pipeline's name is unique and no model's (ensembles and models share Triton's namespace)."""
    name = spec.pipelines[i].name
    if any(m.name == name for m in spec.models):
        yield Problem(f"spec.pipelines[{i}].name", PIPELINE_NAMED_LIKE_MODEL.format(name=name))
    elif first[name] != i:
        yield Problem(f"spec.pipelines[{i}].name", DUPLICATE_PIPELINE.format(name=name))


def generated_names_free(spec: PipelineSpec) -> Iterator[Problem]:
    """No model or pipeline takes the name of a model the compiler generates (Stream routing's gauge)."""
    if spec.routing.session_affinity != "Stream":
        return
    names = [("models", i, m.name) for i, m in enumerate(spec.models)]
    names += [("pipelines", i, p.name) for i, p in enumerate(spec.pipelines)]
    for kind, i, name in names:
        if name == OPEN_STREAMS_MODEL:
            yield Problem(f"spec.{kind}[{i}].name", RESERVED_MODEL_NAME.format(name=name))


def check_spec(spec: PipelineSpec) -> list[Problem]:
    """The document-wide rules, per model in declaration order, then pipeline names. (minReplicas <=
    maxReplicas is a spec Rule: the spec refuses it before this runs, and the CRD at admission.)"""
    problems: list[Problem] = []
    first_model = first_index(m.name for m in spec.models)
    for i in range(len(spec.models)):
        problems += model_rules.unique_model_name(spec, i, first_model)
        problems += model_rules.unique_tensor_names(spec, i)
        problems += model_rules.tensor_shapes_hold(spec, i)
        problems += model_rules.filled_tensors_not_inputs(spec, i)
        problems += model_rules.completion_kept_on(spec, i)
        problems += model_rules.decoupled_as_its_backend(spec, i)
        problems += model_rules.profiles_on_tensorrt(spec, i)
        problems += model_rules.states_kept(spec, i)
        problems += model_rules.dynamic_batching_batches(spec, i)
        problems += model_rules.preferred_batch_sizes_fit(spec, i)
        problems += model_rules.extra_config_adds_fields(spec, i)
        problems += model_rules.batch_io_named(spec, i)
        problems += model_rules.response_cache_allowed(spec, i)
        problems += model_rules.metric_controls_complete(spec, i)
        problems += model_rules.warmup_samples_whole(spec, i)
    first_pipeline = first_index(p.name for p in spec.pipelines)
    for i in range(len(spec.pipelines)):
        problems += pipeline_name_free(spec, i, first_pipeline)
    problems += generated_names_free(spec)
    return problems
