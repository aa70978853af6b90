"""The rules a TritonPipeline must satisfy before anything is rendered (docs/architecture.md, "Where each
kind of rule lives"; the rules in words: docs/concepts/validation.md): one function per rule, each
yielding a `Problem` per violation, with its message one of the constants below. They mirror Triton
core's own model and ensemble checks, so that a bad pipeline fails at `validate`/`kubectl apply` time
rather than inside a pod.

Document-wide rules run in `check_spec`; pipeline rules read the `PipelineGraph` that
`resolve.resolve_pipeline` builds, which decides what each rule is applied to and in what order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet

from google.protobuf import text_format

from ..errors import Problem, clip
from ..spec import DECOUPLED_BACKENDS, PLATFORM_BACKEND, InputTensor, Model, OutputTensor, PipelineSpec
from ..triton import tritonserver_options
from .plan_types import (
    INPUTS,
    OPEN_STREAMS_MODEL,
    PipelineGraph,
    ResolvedStep,
    Tensor,
    first_index,
    full_dims,
    is_input_ref,
    parse_ref,
    producer,
)
from .triton_config import SPEC_RENDERED, extra_config, mc, readable_extra_config

# --------------------------------------------------------------------------- messages

DUPLICATE_MODEL = "duplicate model name {name!r} (also spec.models[{first}])"
DUPLICATE_TENSOR = "duplicate tensor name {name!r} in model {kind}"
CONTROL_LISTED_AS_INPUT = (
    "control tensor {name!r} is also listed under inputs; the sequence batcher fills control tensors, "
    "so remove it from inputs"
)
STATE_LISTED_AS_INPUT = "state tensor {name!r} is also listed under inputs; Triton fills it"
DYNAMIC_BATCHING_WITHOUT_BATCHES = "dynamic batching needs maxBatchSize > 0"
# Triton's model check (ValidateIOShape): equal element counts, or with -1 the same number of variable-size
# dimensions and equal element counts between them
RESHAPE_SIZE = (
    "reshape {reshape} does not hold the same elements as dims {dims}: Triton refuses the model ('has "
    "different size for dims and reshape')"
)
FORMAT_DIMS = "format {format} needs 3 dims (without the batch dimension), got {dims}"
RESHAPE_TO_SCALAR = (
    "an empty reshape makes the tensor a scalar, which a model without batching (maxBatchSize 0) cannot "
    "have: Triton refuses the model ('cannot have empty reshape for non-batching model')"
)
SHAPE_TENSOR_PLATFORM = (
    "isShapeTensor is for TensorRT models (backend tensorrt or platform tensorrt_plan), and model {model!r} "
    "runs on {runtime}: Triton refuses it ('shape tensors are only supported for TensorRT platform')"
)
# Triton's implicit state management "requires backend support": of NVIDIA's backends, onnxruntime, tensorrt
# and pytorch keep the state between a sequence's requests; the ones below load the model and never update it
# (none calls the backend API's TRITONBACKEND_StateNew). A backend of another name is a custom one, built on
# that API, which may keep states (Triton's own qa/L0_implicit_state backend does): its models pass.
STATELESS_BACKENDS = frozenset({"python", "tensorflow", "openvino", "fil", "dali", "vllm", "tensorrtllm"})
STATE_WITHOUT_BACKEND_SUPPORT = (
    "implicit states need a backend that keeps them between a sequence's requests (NVIDIA's onnxruntime, "
    "tensorrt or pytorch, or a custom backend that does); model {model!r} runs on {runtime}, which would "
    "never update the state: keep the state in the model itself"
)
INITIAL_STATE_TYPE = "the initial state's dataType {have} differs from the state's {want}"
# Triton's sequence batcher (GenerateInitialStateData) and sequence state, when they load the model
INITIAL_STATE_RANK = (
    "the initial state's dims {have} and the state's {want} differ in rank: Triton refuses the model "
    "(\"Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions\")"
)
INITIAL_STATE_DIM = (
    "the initial state's dims {have} differ from the state's {want} where the state's are fixed: Triton "
    "refuses the model (\"'initial_state' dim ... doesn't match 'state' dim description\")"
)
GROWABLE_WITHOUT_ONE_BUFFER = (
    "useGrowableMemory needs useSameBufferForInputOutput: Triton refuses the model ('In order to "
    "'use_growable_memory', you must also enable 'use_single_buffer'')"
)
GROWABLE_OFF_GPU = (
    "useGrowableMemory works with GPU instances only, and model {model!r} runs {where}: Triton refuses the "
    "model (\"'use_growable_memory' can only work with KIND_GPU model instances\")"
)
PREFERRED_ABOVE_MAX = "preferred batch size {size} exceeds maxBatchSize {max}"
EXTRA_CONFIG_UNREADABLE = "is not Triton's config text format: line {line}, column {column}: {error}"
EXTRA_CONFIG_RENDERED = "sets {field}, which the spec renders from {spec}: set that instead"
PROFILE_PLATFORM = (
    "profile picks TensorRT optimization profiles, and model {model!r} runs on {runtime}: Triton refuses "
    "it ('specifies profile field which is only supported for TensorRT models')"
)
# what Triton refuses of the fields an extraConfig adds (core's ValidateBatchIO and ValidateModelConfig)
BATCH_IO_SOURCES = (
    "{field}[{j}] ({kind}) takes one source_input, got {count}: Triton refuses the model ('expects 1 "
    "source input')"
)
BATCH_INPUT_TYPE = (
    "batch_input[{j}] has data_type {type}: Triton refuses the model ('batch input data type must be "
    "TYPE_INT32 or TYPE_FP32')"
)
BATCH_IO_UNKNOWN_SOURCE = (
    "{field}[{j}] names source_input {name!r}, which is none of the model's inputs ({known}): Triton "
    "refuses the model ('unknown source input name')"
)
BATCH_OUTPUT_UNKNOWN_TARGET = (
    "batch_output[{j}] names target_name {name!r}, which is none of the model's outputs ({known}): Triton "
    "refuses the model ('unknown target output name')"
)
BATCH_OUTPUT_TARGET_TWICE = (
    "batch_output[{j}] names target_name {name!r} twice: Triton refuses the model ('can only be "
    "specified once')"
)
RESPONSE_CACHE_UNSUPPORTED = (
    "response_cache is enabled on a model with {what}: Triton refuses the model ('Response Cache does not "
    "currently support model ... with {words}')"
)
METRIC_CONTROL_INCOMPLETE = (
    "model_metrics.metric_control[{j}] needs {what}: Triton refuses the model ('{words}')"
)
# what Triton refuses of an extraConfig's warmup samples as it loads each instance (GenerateWarmupData, and
# the request each sample becomes)
WARMUP_VARIABLE_DIMS = (
    "model_warmup[{j}] gives input {input!r} dims {dims}: Triton refuses the model ('warmup setting expects "
    "all variable-size dimensions are specified')"
)
WARMUP_NO_DATA = (
    "model_warmup[{j}] gives input {input!r} no data (zero_data, random_data or input_data_file): Triton "
    "refuses the model ('warmup setting expects input ... to have input_data_type set')"
)
WARMUP_DATA_TYPE = (
    "model_warmup[{j}] gives input {input!r} data type {given}, and the model's input is {want}: Triton "
    "refuses the model (\"inference input '{input}' data-type is '{given}'\")"
)
PIPELINE_NAMED_LIKE_MODEL = (
    "pipeline name {name!r} is also a model name; Triton serves both under one namespace"
)
DUPLICATE_PIPELINE = "duplicate pipeline name {name!r}"
RESERVED_MODEL_NAME = (
    "name {name!r} is reserved for the open-streams gauge model generated with routing.sessionAffinity "
    "Stream; rename it"
)

RESERVED_STEP_NAME = "step name {name!r} is reserved for pipeline inputs"
STEP_NAME_NEEDED = (
    "model {model!r} holds a '.', which a step's name cannot (a reference is STEP.TENSOR): give this step "
    "a name of its own, such as {suggestion!r}"
)
DUPLICATE_STEP = (
    "duplicate step name {name!r} (also {first}); give one a distinct `name` — each tensor must have "
    "exactly one producer"
)
UNKNOWN_MODEL = "unknown model {model!r} (models: {known})"
STEP_VERSION_NOT_SERVED = (
    "model {model!r} serves versions {versions} only (its versionPolicy): Triton refuses the ensemble "
    "('ensemble {pipeline!r} depends on {model!r} whose required version {version} is not loaded')"
)
DUPLICATE_INPUT = "duplicate pipeline input {name!r}"
DUPLICATE_OUTPUT = (
    "pipeline output {name!r} is listed twice (also outputs[{first}]){detail}; list it once: a "
    "TritonPipeline keys its outputs by name"
)
DUPLICATE_OUTPUT_SAME = ", both from {src} (Triton loads such an ensemble and answers the output once)"
DUPLICATE_OUTPUT_OTHER = ", from {src} and from {other}: a tensor has exactly one producer"
OUTPUT_NAMED_LIKE_INPUT = "{name!r} is already the name of a pipeline input"
ENSEMBLE_BATCH_ABOVE_STEPS = (
    "ensemble maxBatchSize {size} exceeds the maxBatchSize of step(s) {steps}; it must be <= every "
    "batching step's maxBatchSize"
)
CONTROL_MAPPED = (
    "{name!r} is a sequence control of model {model!r}; Triton's sequence batcher fills it from the "
    "request's sequence flags, so do not map it"
)
STATE_MAPPED = "{name!r} is an implicit state of model {model!r}; do not map it"
UNKNOWN_MODEL_INPUT = "model {model!r} has no input {name!r} (inputs: {known}){hint}"
UNDECLARED_TENSORS = (
    "model {model!r} declares no {kind}: Triton completes them from the backend when it loads the model, "
    "but a pipeline checks and maps only declared tensors; list {name!r} (and the rest the step uses) "
    "under the model's {kind} (a tritonserver that loaded it shows them at GET /v2/models/{model}/config)"
)
AUTO_COMPLETE_OFF = (
    "model {model!r} declares no outputs, so it relies on Triton to complete its config from the backend, "
    "and spec.server.args turns that off ({flag}): declare its inputs and outputs, or drop {flag}"
)
DECOUPLED_BY_BACKEND = (
    "model {model!r} runs on backend {backend!r}, whose models are decoupled ({how}), and pipeline "
    "{pipeline!r} runs it as step {step!r}: set decoupled: true, so the pipeline is checked as Triton runs "
    "it (a step's model is loaded with the transaction policy it declares)"
)
CONTROL_WITHOUT_SEQUENCE_BATCHING = " (sequence controls are only available on models with sequenceBatching)"
BAD_REFERENCE = "expected 'inputs.NAME' or 'STEP.TENSOR', got {ref!r}"
UNKNOWN_INPUT = "unknown pipeline input {name!r} (inputs: {known})"
UNKNOWN_STEP = "unknown step {name!r} (steps: {known})"
UNKNOWN_OUTPUT = "step {step!r} (model {model!r}) has no output {name!r} (outputs: {known})"
DATA_TYPE_MISMATCH = (
    "data type mismatch: {src} is {have} but input {name!r} of model {model!r} expects {want}"
)
SHAPE_MISMATCH = (
    "shape mismatch: {src} has dims {have} but input {name!r} of model {model!r} expects {want} "
    "(batch dimension included, -1 matches any size)"
)
INPUT_RANK_HINT = (
    "; pipeline input dims exclude the batch dimension when the pipeline batches (maxBatchSize > 0) "
    "and include it otherwise"
)
REQUIRED_INPUT_UNMAPPED = (
    "required input {name!r} of model {model!r} is not mapped (add `{name}: inputs.NAME` or "
    "`{name}: STEP.TENSOR`)"
)
OUTPUT_FROM_INPUT = "a pipeline output must come from a step output, not straight from an input"
SHARED_TENSOR_NAMED_TWICE = (
    "{src} is exposed as pipeline outputs {names}; with fanOut: shared one tensor can have only one "
    "name — use fanOut: router"
)
CYCLE = "cycle in pipeline {pipeline!r}: {members}"
UNUSED_INPUT = "pipeline input {name!r} is not used by any step"
# Triton loads an ensemble whose optional input feeds a required model input, and fails each request that
# leaves the input out at that step ("expected 1 inputs but got 0 inputs for model ..."; measured on the
# real server, tests/test_optional_inputs.py).
OPTIONAL_INPUT_TO_REQUIRED = (
    "pipeline input {name!r} is optional but feeds {consumer}, a required input of model {model!r}: a "
    "request that leaves {name!r} out would fail there; mark that model input optional too, or the "
    "pipeline input not optional"
)
STEP_WITHOUT_INPUTS = "step {name!r} has no inputs, so the ensemble would never run it"
DEAD_STEP = "step {name!r} does not contribute to any pipeline output (unreachable from outputs)"
# Triton core refuses an ensemble whose step (or whose set of outputs) "receives inputs originated from
# different decoupled models" (ensemble_utils.cc, ValidateEnsembleConfig).
DECOUPLED_ORIGINS = (
    "{what} receives tensors that originate from different decoupled steps ({detail}); Triton refuses "
    "this ensemble ('receives inputs originated from different decoupled models'): all inputs of a step, "
    "and all outputs of a pipeline, must descend from the same nearest decoupled step, or all from none"
)
# Triton's ensemble scheduler sends each response of a decoupled step downstream as a request of its own,
# each carrying the sequence flags (START, END) and correlation ID of the client request it answers, and
# runs them concurrently: a sequence-batched model after it sees START once per response, END before the
# last response, and refuses what comes after END (seen on the real server: tests/test_ensemble_pitfalls.py).
SEQUENCE_AFTER_DECOUPLED = (
    "step {step!r} (model {model!r}) is sequence-batched and reads the responses of decoupled step "
    "{source!r} ({route}){others}; in a Triton ensemble every response of a decoupled step carries the "
    "sequence flags of the request it answers, so {step!r} would get START once per response, END before "
    "the last response, and requests after END refused: its sequences would not stay whole. Put the "
    "sequence step before the decoupled one, serve them as two pipelines, or make model {source_model!r} "
    "answer once per request (decoupled: false)"
)
# Requests of one sequence sent back to back (a gRPC stream does not wait for answers) run side by side on
# a step with several instances, and the first to finish goes on first: the sequence step behind it then
# sees them out of order (measured: 1, 2, 3 through two instances gave "must specify the START flag" twice;
# with preserve_ordering the totals 1, 3, 6; tests/test_ensemble_pitfalls.py).
UNORDERED_BEFORE_SEQUENCE = (
    "step {step!r} (model {model!r}) may run {instances} instances at once and feeds sequence-batched step "
    "{sequence!r} ({route}); requests of one sequence sent back to back can overtake each other there and "
    "reach {sequence!r} out of order (START not first: 'must specify the START flag'; running state updated "
    "in the wrong order). {fix}"
)
KEEP_ORDER_WITH_BATCHER = (
    "Set dynamicBatching: {{preserveOrdering: true}} on model {model!r} (Triton then passes answers on in "
    "request order), or run one instance"
)
KEEP_ORDER_WITH_ONE_INSTANCE = (
    "Run one instance of model {model!r} (preserveOrdering needs dynamicBatching, which needs "
    "maxBatchSize > 0)"
)
SEQUENCE_CONTROL_NAMES = frozenset({"START", "END", "READY", "CORRID"})  # what a user may try to map


def same_type(a: str, b: str) -> bool:
    """STRING is Triton's older spelling of BYTES."""
    return {a, b} <= {"BYTES", "STRING"} or a == b


def dims_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Equal rank and every dimension equal, with -1 matching anything (Triton's ensemble check)."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _fmt_dims(dims: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


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
        problems += unique_model_name(spec, i, first_model)
        problems += unique_tensor_names(spec, i)
        problems += tensor_shapes_hold(spec, i)
        problems += filled_tensors_not_inputs(spec, i)
        problems += completion_kept_on(spec, i)
        problems += decoupled_as_its_backend(spec, i)
        problems += profiles_on_tensorrt(spec, i)
        problems += states_kept(spec, i)
        problems += dynamic_batching_batches(spec, i)
        problems += preferred_batch_sizes_fit(spec, i)
        problems += extra_config_adds_fields(spec, i)
        problems += batch_io_named(spec, i)
        problems += response_cache_allowed(spec, i)
        problems += metric_controls_complete(spec, i)
        problems += warmup_samples_whole(spec, i)
    first_pipeline = first_index(p.name for p in spec.pipelines)
    for i in range(len(spec.pipelines)):
        problems += pipeline_name_free(spec, i, first_pipeline)
    problems += generated_names_free(spec)
    return problems


# --------------------------------------------------------------------------- names in a pipeline


def step_name_free(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """One producer per tensor: step names are unique, and `inputs` names the pipeline inputs."""
    step = g.pipeline.steps[j]
    name = step.step_name
    path = f"{g.step_path(j)}.name" if step.name else f"{g.step_path(j)}.model"
    if not step.name and "." in step.model:
        message = STEP_NAME_NEEDED.format(model=step.model, suggestion=step.model.replace(".", "_"))
        yield Problem(f"{g.step_path(j)}.name", message)
    elif name == INPUTS:
        yield Problem(path, RESERVED_STEP_NAME.format(name=INPUTS))
    elif g.first_step[name] != j:
        yield Problem(path, DUPLICATE_STEP.format(name=name, first=g.step_path(g.first_step[name])))


def step_model_known(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """Every step runs a declared model."""
    step = g.pipeline.steps[j]
    if step.model not in g.models:
        known = ", ".join(sorted(m.name for m in g.spec.models))
        yield Problem(f"{g.step_path(j)}.model", UNKNOWN_MODEL.format(model=step.model, known=known))


def step_version_served(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """A step that calls a version calls one its model's versionPolicy serves, where the spec says which
    (`specific`; which versions `latest` and `all` serve depends on the model's files)."""
    step = g.pipeline.steps[j]
    policy = g.models[step.model].version_policy
    if step.version is None or policy is None or policy.policy != "specific":
        return
    if step.version not in policy.versions:
        versions = ", ".join(str(v) for v in policy.versions)
        message = STEP_VERSION_NOT_SERVED.format(
            model=step.model, versions=versions, pipeline=g.pipeline.name, version=step.version
        )
        yield Problem(f"{g.step_path(j)}.version", message)


def unique_input_names(g: PipelineGraph) -> Iterator[Problem]:
    """Pipeline input names are unique."""
    first = first_index(i.name for i in g.pipeline.inputs)
    for j, i in enumerate(g.pipeline.inputs):
        if first[i.name] != j:
            yield Problem(f"{g.path}.inputs[{j}].name", DUPLICATE_INPUT.format(name=i.name))


def unique_output_names(g: PipelineGraph) -> Iterator[Problem]:
    """One producer per tensor: pipeline output names are unique and differ from the input names."""
    first = first_index(o.name for o in g.pipeline.outputs)
    for j, o in enumerate(g.pipeline.outputs):
        if first[o.name] != j:
            earlier = g.pipeline.outputs[first[o.name]].source
            detail = (
                DUPLICATE_OUTPUT_SAME.format(src=o.source)
                if earlier == o.source
                else DUPLICATE_OUTPUT_OTHER.format(src=earlier, other=o.source)
            )
            yield Problem(
                f"{g.path}.outputs[{j}].name",
                DUPLICATE_OUTPUT.format(name=o.name, first=first[o.name], detail=detail),
            )
        elif o.name in g.inputs:
            yield Problem(f"{g.path}.outputs[{j}].name", OUTPUT_NAMED_LIKE_INPUT.format(name=o.name))


def ensemble_batch_size_fits(g: PipelineGraph) -> Iterator[Problem]:
    """An ensemble's maxBatchSize is <= every batching step's (steps with maxBatchSize 0 are exempt)."""
    size = g.pipeline.max_batch_size
    if size is None:
        return
    limiting = sorted(
        (s for s in g.steps.values() if 0 < s.model.max_batch_size < size), key=lambda s: s.name
    )
    if limiting:
        steps = ", ".join(f"{s.name} ({s.model.name}: {s.model.max_batch_size})" for s in limiting)
        yield Problem(f"{g.path}.maxBatchSize", ENSEMBLE_BATCH_ABOVE_STEPS.format(size=size, steps=steps))


# --------------------------------------------------------------------------- dataflow


def maps_a_model_input(g: PipelineGraph, step: ResolvedStep, key: str) -> Iterator[Problem]:
    """A step maps only its model's declared inputs, and never what Triton fills (sequence controls,
    implicit states)."""
    model = step.model
    sb = model.sequence_batching
    path = f"{g.step_path(step.index)}.inputs.{key}"
    if sb is not None and key in sb.controls.names():
        yield Problem(path, CONTROL_MAPPED.format(name=key, model=model.name))
    elif sb is not None and key in {s.input_name for s in sb.states}:
        yield Problem(path, STATE_MAPPED.format(name=key, model=model.name))
    elif not model.inputs:
        yield Problem(path, UNDECLARED_TENSORS.format(model=model.name, kind="inputs", name=key))
    elif key not in {t.name for t in model.inputs}:
        hint = (
            CONTROL_WITHOUT_SEQUENCE_BATCHING if key.upper() in SEQUENCE_CONTROL_NAMES and sb is None else ""
        )
        known = ", ".join(dict.fromkeys(t.name for t in model.inputs))
        yield Problem(path, UNKNOWN_MODEL_INPUT.format(model=model.name, name=key, known=known, hint=hint))


def reference_resolves(g: PipelineGraph, ref: str, path: str) -> Iterator[Problem]:
    """Every reference names a pipeline input or an output of a step. A reference to a step that is
    itself refused (unknown model, duplicate name) is not reported again."""
    parsed = parse_ref(ref) if isinstance(ref, str) else None
    if parsed is None:
        yield Problem(path, BAD_REFERENCE.format(ref=ref))
        return
    head, tail = parsed
    if any(ref.startswith(f"{name}.") for name in g.first_step if "." in name):
        return  # a step named after a dotted model: refused at its name (step_name_free)
    if head == INPUTS:
        if tail not in g.inputs:
            known = ", ".join(i.name for i in g.pipeline.inputs) or "none"
            yield Problem(path, UNKNOWN_INPUT.format(name=tail, known=known))
    elif head not in g.first_step:
        yield Problem(path, UNKNOWN_STEP.format(name=head, known=", ".join(g.first_step)))
    elif head in g.steps:
        model = g.steps[head].model
        if not model.outputs:
            yield Problem(path, UNDECLARED_TENSORS.format(model=model.name, kind="outputs", name=tail))
        elif tail not in {o.name for o in model.outputs}:
            known = ", ".join(o.name for o in model.outputs)
            yield Problem(path, UNKNOWN_OUTPUT.format(step=head, model=model.name, name=tail, known=known))


def _wanted(step: ResolvedStep, key: str) -> Tensor:
    """What a step's model input `key` accepts, batch dimension included."""
    declared = {t.name: t for t in step.model.inputs}[key]  # duplicates: unique_tensor_names
    return Tensor(declared.data_type, full_dims(declared.dims, step.model.max_batch_size > 0))


def data_types_agree(g: PipelineGraph, step: ResolvedStep, key: str, src: str) -> Iterator[Problem]:
    """Producer and consumer agree on the data type (BYTES and STRING are one type)."""
    have, want = g.catalogue[src], _wanted(step, key)
    if not same_type(have.data_type, want.data_type):
        yield Problem(
            f"{g.step_path(step.index)}.inputs.{key}",
            DATA_TYPE_MISMATCH.format(
                src=src, have=have.data_type, name=key, model=step.model.name, want=want.data_type
            ),
        )


def shapes_agree(g: PipelineGraph, step: ResolvedStep, key: str, src: str) -> Iterator[Problem]:
    """Producer and consumer agree on the full shape: same rank, each dimension equal or -1."""
    have, want = g.catalogue[src], _wanted(step, key)
    if not dims_compatible(have.full_dims, want.full_dims):
        message = SHAPE_MISMATCH.format(
            src=src,
            have=_fmt_dims(have.full_dims),
            name=key,
            model=step.model.name,
            want=_fmt_dims(want.full_dims),
        )
        if is_input_ref(src) and len(have.full_dims) != len(want.full_dims):
            message += INPUT_RANK_HINT
        yield Problem(f"{g.step_path(step.index)}.inputs.{key}", message)


def required_inputs_mapped(g: PipelineGraph, step: ResolvedStep) -> Iterator[Problem]:
    """Every required model input is mapped (a control or state listed under inputs is reported once,
    by `filled_tensors_not_inputs`)."""
    sb = step.model.sequence_batching
    filled = {*sb.controls.names(), *(s.input_name for s in sb.states)} if sb else set()
    for t in step.model.inputs:
        if t.name not in step.inputs and not t.optional and t.name not in filled:
            yield Problem(
                f"{g.step_path(step.index)}.inputs",
                REQUIRED_INPUT_UNMAPPED.format(name=t.name, model=step.model.name),
            )


def output_from_a_step(g: PipelineGraph, j: int) -> Iterator[Problem]:
    """A pipeline output comes from a step (an ensemble cannot pass an input straight through)."""
    parsed = parse_ref(g.pipeline.outputs[j].source)
    if parsed is not None and parsed[0] == INPUTS:
        yield Problem(f"{g.path}.outputs[{j}].from", OUTPUT_FROM_INPUT)


def shared_tensor_named_once(g: PipelineGraph, j: int, src: str) -> Iterator[Problem]:
    """Under fanOut: shared a tensor has one name, so it can be exposed as one pipeline output only."""
    if g.pipeline.fan_out != "shared":
        return
    named = [c.name for c in g.consumers[src] if c.step is None]
    if len(named) > 1:
        yield Problem(
            f"{g.path}.outputs[{j}].from", SHARED_TENSOR_NAMED_TWICE.format(src=src, names=", ".join(named))
        )


def acyclic(g: PipelineGraph, cycle: Sequence[str]) -> Iterator[Problem]:
    """No cycles: `cycle` is the one the dataflow order ran into (first member repeated at the end)."""
    if cycle:
        yield Problem(
            f"{g.step_path(g.steps[cycle[-1]].index)}.inputs",
            CYCLE.format(pipeline=g.pipeline.name, members=" -> ".join(cycle)),
        )


def inputs_used(g: PipelineGraph) -> Iterator[Problem]:
    """Every pipeline input is used. An input named by a mapping that failed for another reason, or any
    misspelt `inputs.X`, would make this finding noise, so then it is skipped."""
    referenced = {v for st in g.pipeline.steps for v in st.inputs.values() if isinstance(v, str)}
    if any(is_input_ref(r) and r.split(".", 1)[1] not in g.inputs for r in referenced):
        return
    for name, j in g.inputs.items():
        ref = f"{INPUTS}.{name}"
        if ref not in referenced and not g.consumers.get(ref):
            yield Problem(f"{g.path}.inputs[{j}]", UNUSED_INPUT.format(name=name))


def optional_inputs_stay_optional(g: PipelineGraph) -> Iterator[Problem]:
    """An optional pipeline input feeds only optional model inputs (directly or through its router)."""
    for i in g.pipeline.inputs:
        if not i.optional or g.inputs.get(i.name) is None:
            continue
        for c in g.consumers.get(f"{INPUTS}.{i.name}", []):
            step = g.steps[c.step] if c.step else None
            wanted = next((t for t in step.model.inputs if t.name == c.name), None) if step else None
            if step is not None and wanted is not None and not wanted.optional:
                yield Problem(
                    f"{g.step_path(step.index)}.inputs.{c.name}",
                    OPTIONAL_INPUT_TO_REQUIRED.format(name=i.name, consumer=c.label, model=step.model.name),
                )


def steps_have_inputs(g: PipelineGraph) -> Iterator[Problem]:
    """Every step reads something (Triton never runs a step without inputs)."""
    for step in g.steps.values():
        if not step.inputs:
            yield Problem(f"{g.step_path(step.index)}.inputs", STEP_WITHOUT_INPUTS.format(name=step.name))


def steps_reach_outputs(g: PipelineGraph) -> Iterator[Problem]:
    """Every step feeds some pipeline output, directly or through other steps (Triton refuses a step
    without output_map)."""
    useful: set[str] = set()
    frontier = [producer(src) for src, cs in g.consumers.items() if any(c.step is None for c in cs)]
    while frontier:
        s = frontier.pop()
        if s in useful or s == INPUTS:
            continue
        useful.add(s)
        frontier.extend(g.deps.get(s, ()))
    for step in g.steps.values():
        if step.name not in useful:
            yield Problem(g.step_path(step.index), DEAD_STEP.format(name=step.name))


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
            head = producer(ref)
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


def decoupled_origins_agree(g: PipelineGraph) -> Iterator[Problem]:
    """No re-join of tensors from different decoupled steps (see `decoupled_conflicts`), per step and
    for the pipeline outputs. Needs the dataflow order."""
    order = g.order or []
    inputs_of = {name: [ref for _, ref in sorted(g.steps[name].inputs.items())] for name in order}
    outputs = [(f"{g.path}.outputs[{j}].from", o.source) for j, o in enumerate(g.pipeline.outputs)]
    decoupled = {s.name for s in g.steps.values() if s.model.decoupled}
    for where, sources in decoupled_conflicts(order, inputs_of, decoupled, outputs):
        detail = "; ".join(
            f"{ref} comes from decoupled step {origin!r}" if origin else f"{ref} from no decoupled step"
            for ref, origin in sources
        )
        if where in g.steps:
            what, path = f"step {where!r}", f"{g.step_path(g.steps[where].index)}.inputs"
        else:
            what, path = f"pipeline {g.pipeline.name!r} (its outputs)", where
        yield Problem(path, DECOUPLED_ORIGINS.format(what=what, detail=detail))


def sequence_steps_before_decoupled(g: PipelineGraph) -> Iterator[Problem]:
    """No sequence-batched step downstream of a decoupled step, by any route: directly, through other
    steps, fan-outs (the routers inserted later copy every response through) or joins. Triton cannot keep
    such a sequence whole (SEQUENCE_AFTER_DECOUPLED). Needs the dataflow order."""
    # step -> {decoupled step upstream: the shortest route from it, as step names}
    upstream: dict[str, dict[str, list[str]]] = {}
    for name in g.order or []:
        found: dict[str, list[str]] = {}
        for dep in sorted(g.deps.get(name, ()), key=lambda d: g.steps[d].index):
            routes = dict(upstream.get(dep, {}))
            if g.steps[dep].model.decoupled:
                routes[dep] = []
            for origin, route in routes.items():
                if origin not in found or len(route) + 1 < len(found[origin]):
                    found[origin] = [*route, dep]
        upstream[name] = found
        step = g.steps[name]
        if step.model.sequence_batching is None or not found:
            continue
        nearest = min(found, key=lambda o: (len(found[o]), g.steps[o].index))
        rest = sorted((o for o in found if o != nearest), key=lambda o: g.steps[o].index)
        yield Problem(
            g.step_path(step.index),
            SEQUENCE_AFTER_DECOUPLED.format(
                step=name,
                model=step.model.name,
                source=nearest,
                route=" -> ".join([*found[nearest], name]),
                others=f"; also of decoupled step(s) {', '.join(map(repr, rest))}" if rest else "",
                source_model=g.steps[nearest].model.name,
            ),
        )


# Triton's instance count for a model with no instance group in a pod without GPUs, by backend (core's
# SetDefaultInstanceCount: 2 CPU instances for these backends, 1 for the rest)
DEFAULT_CPU_INSTANCES = {"onnxruntime": 2, "tensorflow": 2}


def max_instances(model: Model, server_gpus: int) -> int:
    """How many instances of the model Triton may run at once in a pod with `server_gpus` GPUs: a GPU (or
    AUTO) group's count is per GPU unless it pins GPUs; no group at all is one instance per GPU, and
    without GPUs Triton's default count for the backend."""
    if not model.instances:
        if server_gpus:
            return server_gpus
        return DEFAULT_CPU_INSTANCES.get(_backend(model), 1)
    total = 0
    for inst in model.instances:
        per_gpu = inst.kind in ("GPU", "AUTO") and server_gpus > 0
        total += inst.count * (len(inst.gpus) or server_gpus if per_gpu else 1)
    return total


def steps_before_a_sequence_keep_order(g: PipelineGraph) -> Iterator[Problem]:
    """Every step upstream of a sequence-batched step passes a sequence's requests on in the order they
    came (UNORDERED_BEFORE_SEQUENCE): one instance, or dynamic batching with preserveOrdering. A sequence
    step itself keeps its sequences in order (its batcher binds each to one slot), and so does what it
    feeds only through other sequence steps. Needs the dataflow order."""
    gpus = g.spec.server.gpus
    for name in g.order or []:
        step = g.steps[name]
        model = step.model
        if model.sequence_batching is not None:
            continue
        db = model.dynamic_batching
        instances = max_instances(model, gpus)
        if instances <= 1 or (db is not None and db.preserve_ordering):
            continue
        route = g.route_to_sequence_step(name)
        if route is None:
            continue
        fix = KEEP_ORDER_WITH_BATCHER if model.max_batch_size > 0 else KEEP_ORDER_WITH_ONE_INSTANCE
        yield Problem(
            g.step_path(step.index),
            UNORDERED_BEFORE_SEQUENCE.format(
                step=name,
                model=model.name,
                instances=instances,
                sequence=route[-1],
                route=" -> ".join(route),
                fix=fix.format(model=model.name),
            ),
        )
