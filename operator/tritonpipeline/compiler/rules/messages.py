"""The rules' messages, one named constant each (a test checks that every one is produced by a case
of tests/test_spec_errors.py), and the small comparisons several rules share."""

from __future__ import annotations

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
# real server, tests/component/test_optional_inputs.py).
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
# last response, and refuses what comes after END (seen on the real server:
# tests/component/test_ensemble_pitfalls.py).
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
# with preserve_ordering the totals 1, 3, 6; tests/component/test_ensemble_pitfalls.py).
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


# conditions (`when:`, outputs' orFrom and default), served by compiler/orchestrator_model.py
CONDITION_FROM_BRANCH = (
    "the condition reads {ref}, an output of step {step!r}, which runs under a condition itself; a "
    "condition reads a pipeline input or an unconditional step's output (nested branches are not served)"
)
CONDITION_NOT_SCALAR = (
    "the condition reads {ref}, of shape {dims}: a condition needs one value per request (dims [1], with "
    "the batch dimension in front when its owner batches)"
)
CONDITION_TYPE = (
    "{operator} does not fit {ref}, a {data_type} tensor: equals and in take integer, boolean and string "
    "tensors, greaterThan and lessThan numbers"
)
CONDITION_VALUE = "{operator} compares the {data_type} tensor {ref} with {value!r}: give {want}"
BRANCH_READ_ACROSS = (
    "step {step!r} reads {ref} of step {source!r}, which runs only {when}; a step reading a conditional "
    "step's output carries the same `when` (its branch), and branches meet only at a pipeline output "
    "(`orFrom`)"
)
# The orchestrator evaluates each condition once per request, on the head's one answer; it streams a
# branch's responses (a decoupled orchestrator) and passes a sequence's correlation ID and flags on, but not
# both at once: Triton hands a decoupled model a sequence's next request as soon as it has taken the last
# (its answers come later), so the requests of a sequence could overtake each other on their way to the
# sequence step.
CONDITION_AFTER_DECOUPLED = (
    "step {step!r} (model {model!r}) is decoupled and runs for every request of pipeline {pipeline!r}, "
    "which has conditions: a condition is evaluated once per request, on one answer of the steps without "
    "`when`, so a decoupled step may stand in a branch (its responses are streamed) but not among them; "
    "give it a `when`, or serve it in a pipeline of its own"
)
CONDITION_SEQUENCE_AND_DECOUPLED = (
    "step {step!r} (model {model!r}) is sequence-batched and step {decoupled!r} is decoupled, in pipeline "
    "{pipeline!r} with conditions: its orchestrator would be decoupled, and Triton hands a decoupled model "
    "a sequence's next request before the last one is answered, so they could reach {step!r} out of order; "
    "a pipeline with conditions holds sequence-batched or decoupled steps, not both (serve one of them in a "
    "pipeline of its own)"
)
# `speculative: true` runs every branch for every request (compiler/switch_plan.py, speculative_switch)
SPECULATIVE_WITHOUT_CONDITIONS = (
    "speculative runs the branches of a pipeline with conditions beside its other steps, and no step of "
    "pipeline {pipeline!r} has a `when` or a switch"
)
SPECULATIVE_WITH_STATE = (
    "step {step!r} (model {model!r}) runs {when} and is {kind}: a speculative pipeline runs every branch for "
    "every request, which {why}; leave speculative out, or serve the step in a pipeline of its own"
)
SPECULATIVE_SEQUENCE = "would advance its sequences' state with requests that do not take the branch"
SPECULATIVE_DECOUPLED = "would stream the responses of branches not taken"
MERGE_WITHOUT_CONDITIONS = (
    "{field} is for outputs of conditional steps, and no step of pipeline {pipeline!r} has a `when`"
)
MERGE_NEVER_READ = (
    "{ref} is never read: the source before it, {first}, runs for every request (first written wins)"
)
MERGE_MISMATCH = "{ref} is {have}, and {first} (from) is {want}: every source of one output agrees"
DEFAULT_UNCONDITIONAL = "the output's source {ref} runs for every request, so its default is never used"
DEFAULT_VALUE = "output {name} is {data_type} (from {ref}); its default {value!r} is not: give {want}"
DEFAULT_DIMS = "a default fills a tensor of fixed size; the output has dims {dims}"
DEFAULT_BF16 = (
    "a default cannot fill a BF16 output (numpy, which the orchestrator builds it with, has no BF16)"
)
SWITCH_UNKNOWN_STEP = (
    "no step {name!r} in pipeline {pipeline!r}; a switch names steps of its `steps` ({known})"
)
SWITCH_STEP_GUARDED_TWICE = (
    "step {name!r} already runs {when} ({where}); a step belongs to one branch: one `when` or one case"
)
