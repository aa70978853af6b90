"""The rules of each model of `spec.models` on its own (spec.models[i])."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from google.protobuf import text_format

from ...errors import Problem, clip
from ...spec import DECOUPLED_BACKENDS, PLATFORM_BACKEND, InputTensor, Model, OutputTensor, PipelineSpec
from ...triton import tritonserver_options
from ..triton_config import SPEC_RENDERED, extra_config, mc, readable_extra_config
from .messages import (
    AUTO_COMPLETE_OFF,
    BATCH_INPUT_TYPE,
    BATCH_IO_SOURCES,
    BATCH_IO_UNKNOWN_SOURCE,
    BATCH_OUTPUT_TARGET_TWICE,
    BATCH_OUTPUT_UNKNOWN_TARGET,
    CONTROL_LISTED_AS_INPUT,
    DECOUPLED_BY_BACKEND,
    DUPLICATE_MODEL,
    DUPLICATE_TENSOR,
    DYNAMIC_BATCHING_WITHOUT_BATCHES,
    EXTRA_CONFIG_RENDERED,
    EXTRA_CONFIG_UNREADABLE,
    FORMAT_DIMS,
    GROWABLE_OFF_GPU,
    GROWABLE_WITHOUT_ONE_BUFFER,
    INITIAL_STATE_DIM,
    INITIAL_STATE_RANK,
    INITIAL_STATE_TYPE,
    METRIC_CONTROL_INCOMPLETE,
    PREFERRED_ABOVE_MAX,
    PROFILE_PLATFORM,
    RESHAPE_SIZE,
    RESHAPE_TO_SCALAR,
    RESPONSE_CACHE_UNSUPPORTED,
    SHAPE_TENSOR_PLATFORM,
    STATE_LISTED_AS_INPUT,
    STATE_WITHOUT_BACKEND_SUPPORT,
    STATELESS_BACKENDS,
    WARMUP_DATA_TYPE,
    WARMUP_NO_DATA,
    WARMUP_VARIABLE_DIMS,
    _fmt_dims,
)

# --------------------------------------------------------------------------- models (spec.models[i])


def unique_model_name(spec: PipelineSpec, i: int, first: Mapping[str, int]) -> Iterator[Problem]:
    """Model names are unique (Triton has one namespace of models)."""
    name = spec.models[i].name
    if first[name] != i:
        yield Problem(f"spec.models[{i}].name", DUPLICATE_MODEL.format(name=name, first=first[name]))


def unique_tensor_names(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """A model's input names are unique, and so are its output names."""
    model = spec.models[i]
    names = (("inputs", [t.name for t in model.inputs]), ("outputs", [t.name for t in model.outputs]))
    for kind, tensors in names:
        seen: set[str] = set()
        for j, name in enumerate(tensors):
            if name in seen:
                yield Problem(
                    f"spec.models[{i}].{kind}[{j}].name", DUPLICATE_TENSOR.format(name=name, kind=kind)
                )
            seen.add(name)


def filled_tensors_not_inputs(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """Sequence controls and implicit states are filled by Triton, so they are not declared inputs."""
    model = spec.models[i]
    sb = model.sequence_batching
    if sb is None:
        return
    path = f"spec.models[{i}].sequenceBatching"
    input_names = {t.name for t in model.inputs}
    controls = sb.controls
    for field_name, value in (
        ("start", controls.start),
        ("end", controls.end),
        ("ready", controls.ready),
        ("correlationId", controls.correlation_id),
    ):
        if value and value in input_names:
            yield Problem(f"{path}.controls.{field_name}", CONTROL_LISTED_AS_INPUT.format(name=value))
    for j, state in enumerate(sb.states):
        if state.input_name in input_names:
            yield Problem(
                f"{path}.states[{j}].inputName", STATE_LISTED_AS_INPUT.format(name=state.input_name)
            )


def completion_kept_on(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """A model that declares no outputs leaves its interface to Triton's auto-complete, which
    spec.server.args must not turn off."""
    if spec.models[i].outputs:
        return
    flag = tritonserver_options.auto_complete_off(spec.server.args)
    if flag is not None:
        yield Problem(
            f"spec.models[{i}].outputs", AUTO_COMPLETE_OFF.format(model=spec.models[i].name, flag=flag)
        )


def decoupled_as_its_backend(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """A model a step runs declares decoupled as its backend makes it (DECOUPLED_BACKENDS): the render
    writes such a model's transaction policy as declared, which that backend refuses to load."""
    model = spec.models[i]
    how = DECOUPLED_BACKENDS.get(model.backend or "")
    if how is None or model.decoupled:
        return
    runs = [(p.name, s.step_name) for p in spec.pipelines for s in p.steps if s.model == model.name]
    if runs:
        pipeline, step = runs[0]
        yield Problem(
            f"spec.models[{i}].decoupled",
            DECOUPLED_BY_BACKEND.format(
                model=model.name, backend=model.backend, how=how, pipeline=pipeline, step=step
            ),
        )


def _backend(model: Model) -> str:
    """The backend Triton runs a model on (a platform's, where it names a platform)."""
    return model.backend or PLATFORM_BACKEND.get(model.platform or "", "")


def _runtime(model: Model) -> str:
    """What runs a model, in words: its backend, or its platform."""
    return f"backend {model.backend!r}" if model.backend else f"platform {model.platform!r}"


def _chunks(dims: Sequence[int]) -> list[int]:
    """Element counts of the runs of fixed dimensions between variable-size ones (-1)."""
    counts, product = [], 1
    for d in dims:
        if d == -1:
            counts.append(product)
            product = 1
        else:
            product *= d
    return [*counts, product]


def tensor_shapes_hold(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """A reshape holds as many elements as its dims, and is not a scalar without batching; an NHWC/NCHW
    input has 3 dims; a shape tensor belongs to a TensorRT model (Triton's ValidateModelInput/Output)."""
    model = spec.models[i]
    tensors: list[tuple[str, InputTensor | OutputTensor]] = [
        *((f"inputs[{j}]", t) for j, t in enumerate(model.inputs)),
        *((f"outputs[{j}]", t) for j, t in enumerate(model.outputs)),
    ]
    for where, t in tensors:
        path = f"spec.models[{i}].{where}"
        if t.reshape is not None and _chunks(t.reshape) != _chunks(t.dims):
            yield Problem(
                f"{path}.reshape",
                RESHAPE_SIZE.format(reshape=_fmt_dims(tuple(t.reshape)), dims=_fmt_dims(tuple(t.dims))),
            )
        if t.reshape is not None and not t.reshape and model.max_batch_size == 0:
            yield Problem(f"{path}.reshape", RESHAPE_TO_SCALAR)
        if t.is_shape_tensor and _backend(model) != "tensorrt":
            message = SHAPE_TENSOR_PLATFORM.format(model=model.name, runtime=_runtime(model))
            yield Problem(f"{path}.isShapeTensor", message)
        fmt = getattr(t, "format", None)
        if fmt in ("NHWC", "NCHW") and len(t.dims) != 3:
            yield Problem(f"{path}.format", FORMAT_DIMS.format(format=fmt, dims=_fmt_dims(tuple(t.dims))))


def profiles_on_tensorrt(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """An instance group picks optimization profiles of a TensorRT model only (Triton's
    ValidateInstanceGroup)."""
    model = spec.models[i]
    for j, inst in enumerate(model.instances):
        if inst.profile and _backend(model) != "tensorrt":
            message = PROFILE_PLATFORM.format(model=model.name, runtime=_runtime(model))
            yield Problem(f"spec.models[{i}].instances[{j}].profile", message)


def states_kept(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """Implicit states only on a backend that keeps them, each initial state of the state's data type."""
    model = spec.models[i]
    sb = model.sequence_batching
    if sb is None or not sb.states:
        return
    path = f"spec.models[{i}].sequenceBatching.states"
    if _backend(model) in STATELESS_BACKENDS:
        yield Problem(path, STATE_WITHOUT_BACKEND_SUPPORT.format(model=model.name, runtime=_runtime(model)))
    off_gpu = _instances_off_gpu(spec, model)
    for j, state in enumerate(sb.states):
        init = state.initial_state
        if init is not None and init.data_type != state.data_type:
            yield Problem(
                f"{path}[{j}].initialState.dataType",
                INITIAL_STATE_TYPE.format(have=init.data_type, want=state.data_type),
            )
        if init is not None and not _fits(init.dims, state.dims):
            rule = INITIAL_STATE_RANK if len(init.dims) != len(state.dims) else INITIAL_STATE_DIM
            message = rule.format(have=_fmt_dims(tuple(init.dims)), want=_fmt_dims(tuple(state.dims)))
            yield Problem(f"{path}[{j}].initialState.dims", message)
        if state.use_growable_memory and not state.use_same_buffer_for_input_output:
            yield Problem(f"{path}[{j}].useGrowableMemory", GROWABLE_WITHOUT_ONE_BUFFER)
        if state.use_growable_memory and off_gpu:
            message = GROWABLE_OFF_GPU.format(model=model.name, where=off_gpu)
            yield Problem(f"{path}[{j}].useGrowableMemory", message)


def _fits(given: Sequence[int], described: Sequence[int]) -> bool:
    """Fixed dims `given` fit the dims `described`: as many, each equal where the described one is fixed."""
    return len(given) == len(described) and all(d in (-1, g) for g, d in zip(given, described, strict=True))


def _instances_off_gpu(spec: PipelineSpec, model: Model) -> str:
    """Where a model's instances run other than on a GPU, in words ("" when every one is a GPU instance):
    a pod without GPUs, or a group of kind CPU or MODEL."""
    if spec.server.gpus == 0:
        return "in pods without GPUs (server.gpus: 0)"
    kinds = sorted({inst.kind for inst in model.instances} & {"CPU", "MODEL"})
    return f"instances of kind {' and '.join(kinds)}" if kinds else ""


def dynamic_batching_batches(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """Dynamic batching needs a model that batches."""
    model = spec.models[i]
    if model.dynamic_batching is not None and model.max_batch_size == 0:
        yield Problem(f"spec.models[{i}].dynamicBatching", DYNAMIC_BATCHING_WITHOUT_BATCHES)


def preferred_batch_sizes_fit(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """Every preferred batch size (of the one batcher a model has) is <= the model's maxBatchSize."""
    model = spec.models[i]
    batchers = (
        ("sequenceBatching", model.sequence_batching),
        # a dynamic batcher without batching is `dynamic_batching_batches`'s finding
        ("dynamicBatching", model.dynamic_batching if model.max_batch_size else None),
    )
    for field_name, batcher in batchers:
        for j, size in enumerate(batcher.preferred_batch_sizes if batcher else ()):
            if size > model.max_batch_size:
                yield Problem(
                    f"spec.models[{i}].{field_name}.preferredBatchSizes[{j}]",
                    PREFERRED_ABOVE_MAX.format(size=size, max=model.max_batch_size),
                )


def extra_config_adds_fields(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """A model's extraConfig is Triton's text format and sets only fields the spec's own do not render."""
    path = f"spec.models[{i}].extraConfig"
    try:
        extra = extra_config(spec.models[i])
    except text_format.ParseError as exc:
        line, column = exc.GetLine() or 1, exc.GetColumn() or 1
        error = clip(str(exc).split(" : ", 1)[-1])  # protobuf quotes the whole line
        yield Problem(path, EXTRA_CONFIG_UNREADABLE.format(line=line, column=column, error=error))
        return
    for fd, _ in extra.ListFields():
        if fd.name in SPEC_RENDERED:
            yield Problem(path, EXTRA_CONFIG_RENDERED.format(field=fd.name, spec=SPEC_RENDERED[fd.name]))


def _names(tensors: Sequence[InputTensor] | Sequence[OutputTensor]) -> str:
    return ", ".join(t.name for t in tensors)


def batch_io_named(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """An extraConfig's batch_input and batch_output take one source input each, of the model's inputs; a
    batch input is INT32 or FP32; a batch output's targets are distinct outputs of the model. (Tensors a
    model leaves to auto-complete are Triton's to check.)"""
    model, path = spec.models[i], f"spec.models[{i}].extraConfig"
    extra = readable_extra_config(model)
    if extra is None:
        return
    inputs, outputs = {t.name for t in model.inputs}, {t.name for t in model.outputs}
    for field, entries, kinds in (
        ("batch_input", extra.batch_input, mc.BatchInput.Kind),
        ("batch_output", extra.batch_output, mc.BatchOutput.Kind),
    ):
        for j, entry in enumerate(entries):
            kind = kinds.Name(entry.kind)
            if len(entry.source_input) != 1:
                count = len(entry.source_input)
                yield Problem(path, BATCH_IO_SOURCES.format(field=field, j=j, kind=kind, count=count))
            for name in entry.source_input:
                if inputs and name not in inputs:
                    known = _names(model.inputs)
                    yield Problem(
                        path, BATCH_IO_UNKNOWN_SOURCE.format(field=field, j=j, name=name, known=known)
                    )
    for j, entry in enumerate(extra.batch_input):
        if entry.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            yield Problem(path, BATCH_INPUT_TYPE.format(j=j, type=mc.DataType.Name(entry.data_type)))
    for j, entry in enumerate(extra.batch_output):
        for k, name in enumerate(entry.target_name):
            if outputs and name not in outputs:
                known = _names(model.outputs)
                yield Problem(path, BATCH_OUTPUT_UNKNOWN_TARGET.format(j=j, name=name, known=known))
            elif name in entry.target_name[:k]:
                yield Problem(path, BATCH_OUTPUT_TARGET_TWICE.format(j=j, name=name))


def response_cache_allowed(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """An extraConfig's response cache is for a model without sequence batching, and not decoupled."""
    model = spec.models[i]
    extra = readable_extra_config(model)
    if extra is None or not extra.response_cache.enable:
        return
    path = f"spec.models[{i}].extraConfig"
    if model.sequence_batching is not None:
        words = "sequence batching scheduler"
        yield Problem(path, RESPONSE_CACHE_UNSUPPORTED.format(what="sequenceBatching", words=words))
    if model.decoupled:
        words = "'decoupled' transaction policy"
        yield Problem(path, RESPONSE_CACHE_UNSUPPORTED.format(what="decoupled: true", words=words))


def warmup_samples_whole(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """Each warmup sample Triton runs (batch_size > 0) gives every input fixed dims and some data, of the
    data type of the model's input of that name."""
    model, path = spec.models[i], f"spec.models[{i}].extraConfig"
    extra = readable_extra_config(model)
    declared = {t.name: t.data_type for t in model.inputs}
    for j, sample in enumerate(extra.model_warmup if extra is not None else ()):
        if sample.batch_size == 0:  # Triton skips it
            continue
        for name in sorted(sample.inputs):
            given = sample.inputs[name]
            if any(d < 0 for d in given.dims):
                yield Problem(path, WARMUP_VARIABLE_DIMS.format(j=j, input=name, dims=list(given.dims)))
            if given.WhichOneof("input_data_type") is None:
                yield Problem(path, WARMUP_NO_DATA.format(j=j, input=name))
            data_type = mc.DataType.Name(given.data_type).removeprefix("TYPE_")
            if name in declared and data_type != declared[name]:
                message = WARMUP_DATA_TYPE.format(j=j, input=name, given=data_type, want=declared[name])
                yield Problem(path, message)


def metric_controls_complete(spec: PipelineSpec, i: int) -> Iterator[Problem]:
    """An extraConfig's model_metrics names each metric's family and gives its histogram buckets."""
    extra = readable_extra_config(spec.models[i])
    for j, control in enumerate(extra.model_metrics.metric_control if extra is not None else ()):
        if not control.metric_identifier.family:
            words = "metric identifier must specify non-empty 'family'"
            message = METRIC_CONTROL_INCOMPLETE.format(j=j, what="metric_identifier.family", words=words)
            yield Problem(f"spec.models[{i}].extraConfig", message)
        if not control.histogram_options.buckets:
            words = "histogram options must specify non-empty 'buckets'"
            message = METRIC_CONTROL_INCOMPLETE.format(j=j, what="histogram_options.buckets", words=words)
            yield Problem(f"spec.models[{i}].extraConfig", message)
