"""Render Triton model configurations through Triton's own protobuf schema (never string templates)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from google.protobuf import text_format

from ..spec import Model, QueuePolicy, RateLimiter, VersionPolicy
from .plan_types import NATIVE_ROUTER_BACKEND, ROUTER_INPUT, EnsemblePlan, OrchestratorPlan, RouterPlan
from .switch_plan import SWITCH_PARAMETER, SwitchPlan

# Triton's ModelConfig schema as protoc generated it for tritonclient (tritonclient/grpc/model_config_pb2.py
# of the pinned release, BSD-3-Clause): carried here so that the compiler and the operator need neither
# tritonclient nor the numpy it pulls in. tests/unit/test_compiler.py holds it equal to tritonclient's copy.
SCHEMA_FILE = Path(__file__).with_name("model_config_pb2.py")
SCHEMA_MODULE = "tritonclient.grpc.model_config_pb2"


def _model_config_pb2() -> ModuleType:
    """Load the schema under tritonclient's module name, so that a later `import tritonclient.grpc` (the
    client, `serve`) reuses it instead of registering model_config.proto a second time."""
    if SCHEMA_MODULE in sys.modules:
        return sys.modules[SCHEMA_MODULE]
    spec = importlib.util.spec_from_file_location(SCHEMA_MODULE, SCHEMA_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[SCHEMA_MODULE] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:  # the same module, imported the ordinary way for the type checker
    from tritonclient.grpc import model_config_pb2 as mc
else:
    mc = _model_config_pb2()

_KIND = {
    "GPU": mc.ModelInstanceGroup.KIND_GPU,
    "CPU": mc.ModelInstanceGroup.KIND_CPU,
    "AUTO": mc.ModelInstanceGroup.KIND_AUTO,
    "MODEL": mc.ModelInstanceGroup.KIND_MODEL,
}
_CONTROL = mc.ModelSequenceBatching.Control


def data_type(name: str) -> int:
    """'FP32' -> TYPE_FP32; BYTES is Triton's TYPE_STRING."""
    return mc.DataType.Value("TYPE_STRING" if name in ("BYTES", "STRING") else f"TYPE_{name}")


def _transaction_policy(message: Any, indent: int, as_one_line: bool) -> str | None:
    """A transaction policy prints its `decoupled` false too (protobuf leaves a default value out): the
    reader sees what the message's presence tells Triton, that the policy is set."""
    if message.DESCRIPTOR is mc.ModelTransactionPolicy.DESCRIPTOR:
        return f"decoupled: {_param(message.decoupled)}"
    return None


def to_text(config: mc.ModelConfig) -> bytes:
    """Deterministic text format (protobuf prints map entries sorted by key)."""
    return text_format.MessageToString(config, message_formatter=_transaction_policy).encode("utf-8")


def parse_text(text: bytes | str) -> mc.ModelConfig:
    """Parse a config.pbtxt back through the schema (raises on anything Triton would not accept)."""
    config = mc.ModelConfig()
    text_format.Parse(text.decode() if isinstance(text, bytes) else text, config)
    return config


# The config fields the spec's own fields render, each with the spec field that does: a model's extraConfig
# sets any other field (compiler/rules/model_rules.py checks it), and `tritonpipeline import` writes every
# other one there
SPEC_RENDERED: dict[str, str] = {
    "name": "name",
    "platform": "platform",
    "backend": "backend",
    "max_batch_size": "maxBatchSize",
    "input": "inputs",
    "output": "outputs",
    "instance_group": "instances",
    "dynamic_batching": "dynamicBatching",
    "sequence_batching": "sequenceBatching",
    "ensemble_scheduling": "spec.pipelines",
    "model_transaction_policy": "decoupled",
    "parameters": "parameters",
    "version_policy": "versionPolicy",
}


def extra_config(model: Model) -> mc.ModelConfig:
    """A model's extraConfig as Triton's message (empty without one); raises text_format.ParseError."""
    return parse_text(model.extra_config or "")


def readable_extra_config(model: Model) -> mc.ModelConfig | None:
    """A model's extraConfig as Triton's message; None where it does not parse (the compiler's finding:
    rules.extra_config_adds_fields)."""
    try:
        return extra_config(model)
    except text_format.ParseError:
        return None


def _param(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def model_config(model: Model, *, cpu_only: bool, run_by_step: bool = False) -> mc.ModelConfig:
    """Config for one declared model. run_by_step: a pipeline step runs it, so its transaction policy is
    written as declared, false included. A backend's auto-complete then cannot make it decoupled behind the
    pipeline's rules: Triton refuses to load the model instead, saying which backend tried."""
    cfg = mc.ModelConfig(name=model.name, max_batch_size=model.max_batch_size)
    if model.backend:
        cfg.backend = model.backend
    else:
        cfg.platform = model.platform or ""
    for t in model.inputs:
        i = cfg.input.add(name=t.name, data_type=data_type(t.data_type), dims=t.dims, optional=t.optional)
        i.allow_ragged_batch = t.allow_ragged_batch
        i.is_shape_tensor = t.is_shape_tensor
        if t.format is not None:
            i.format = mc.ModelInput.Format.Value(f"FORMAT_{t.format}")
        _reshape(i, t.reshape)
    for o in model.outputs:
        out = cfg.output.add(name=o.name, data_type=data_type(o.data_type), dims=o.dims)
        out.is_shape_tensor = o.is_shape_tensor
        out.label_filename = o.label_filename or ""
        _reshape(out, o.reshape)
    for inst in model.instances:
        kind = "CPU" if cpu_only and inst.kind == "GPU" else inst.kind
        group = cfg.instance_group.add(kind=_KIND[kind], count=inst.count)
        if inst.name is not None:
            group.name = inst.name
        if kind == "GPU" and inst.gpus:
            group.gpus.extend(inst.gpus)
        group.profile.extend(inst.profile)
        group.passive = inst.passive
        if inst.host_policy is not None:
            group.host_policy = inst.host_policy
        if inst.rate_limiter is not None:
            _rate_limiter(group.rate_limiter, inst.rate_limiter)
    if model.dynamic_batching is not None:
        db = model.dynamic_batching
        cfg.dynamic_batching.SetInParent()
        cfg.dynamic_batching.preferred_batch_size.extend(db.preferred_batch_sizes)
        cfg.dynamic_batching.max_queue_delay_microseconds = db.max_queue_delay_microseconds
        cfg.dynamic_batching.preserve_ordering = db.preserve_ordering
        cfg.dynamic_batching.priority_levels = db.priority_levels
        cfg.dynamic_batching.default_priority_level = db.default_priority_level
        if db.default_queue_policy is not None:
            _queue_policy(cfg.dynamic_batching.default_queue_policy, db.default_queue_policy)
        for q in db.priority_queue_policies:
            _queue_policy(cfg.dynamic_batching.priority_queue_policy[q.priority_level], q)
    if model.version_policy is not None:
        _version_policy(cfg.version_policy, model.version_policy)
    if model.sequence_batching is not None:
        _sequence_batching(cfg.sequence_batching, model)
    if model.decoupled or run_by_step:
        cfg.model_transaction_policy.SetInParent()
        cfg.model_transaction_policy.decoupled = model.decoupled
    for key in sorted(model.parameters):
        cfg.parameters[key].string_value = _param(model.parameters[key])
    cfg.MergeFrom(extra_config(model))  # fields none of the above sets (compiler/rules/model_rules.py)
    return cfg


def _rate_limiter(out: mc.ModelRateLimiter, limiter: RateLimiter) -> None:
    out.SetInParent()
    for r in limiter.resources:
        resource = out.resources.add(name=r.name, count=r.count)
        setattr(resource, "global", r.global_)  # a Python keyword
    out.priority = limiter.priority


def _queue_policy(out: mc.ModelQueuePolicy, policy: QueuePolicy) -> None:
    out.SetInParent()
    out.timeout_action = mc.ModelQueuePolicy.TimeoutAction.Value(policy.timeout_action)
    out.default_timeout_microseconds = policy.default_timeout_microseconds
    out.allow_timeout_override = policy.allow_timeout_override
    out.max_queue_size = policy.max_queue_size


def _version_policy(out: mc.ModelVersionPolicy, policy: VersionPolicy) -> None:
    if policy.policy == "latest":
        out.latest.num_versions = policy.num_versions or 1
    elif policy.policy == "all":
        out.all.SetInParent()
    else:
        out.specific.versions.extend(policy.versions)


def _reshape(tensor: mc.ModelInput | mc.ModelOutput, shape: list[int] | None) -> None:
    if shape is not None:
        tensor.reshape.SetInParent()  # an empty shape is meaningful: one value per batch item
        tensor.reshape.shape.extend(shape)


def _sequence_batching(sb: mc.ModelSequenceBatching, model: Model) -> None:
    spec = model.sequence_batching
    assert spec is not None
    sb.max_sequence_idle_microseconds = spec.max_sequence_idle_microseconds
    if spec.strategy == "direct":
        sb.direct.SetInParent()
        sb.direct.max_queue_delay_microseconds = spec.max_queue_delay_microseconds or 0
        sb.direct.minimum_slot_utilization = spec.minimum_slot_utilization or 0.0
    else:
        sb.oldest.SetInParent()
        sb.oldest.max_candidate_sequences = spec.max_candidate_sequences or max(1, model.max_batch_size)
        sb.oldest.preferred_batch_size.extend(spec.preferred_batch_sizes)
        sb.oldest.max_queue_delay_microseconds = spec.max_queue_delay_microseconds or 0
        sb.oldest.preserve_ordering = spec.preserve_ordering
    controls = spec.controls
    flags = (
        (controls.start, _CONTROL.CONTROL_SEQUENCE_START),
        (controls.end, _CONTROL.CONTROL_SEQUENCE_END),
        (controls.ready, _CONTROL.CONTROL_SEQUENCE_READY),
    )
    for name, kind in flags:
        if name:
            control = sb.control_input.add(name=name).control.add(kind=kind)
            if controls.flag_data_type == "FP32":
                control.fp32_false_true.extend([0.0, 1.0])
            elif controls.flag_data_type == "BOOL":
                control.bool_false_true.extend([False, True])
            else:
                control.int32_false_true.extend([0, 1])
    if controls.correlation_id:
        sb.control_input.add(name=controls.correlation_id).control.add(
            kind=_CONTROL.CONTROL_SEQUENCE_CORRID, data_type=data_type(controls.correlation_id_data_type)
        )
    for st in spec.states:
        state = sb.state.add(
            input_name=st.input_name,
            output_name=st.output_name,
            data_type=data_type(st.data_type),
            dims=st.dims,
            use_same_buffer_for_input_output=st.use_same_buffer_for_input_output,
            use_growable_memory=st.use_growable_memory,
        )
        if st.initial_state is not None:
            init = st.initial_state
            initial = state.initial_state.add(
                name=init.name, data_type=data_type(init.data_type), dims=init.dims
            )
            if init.data_file is not None:
                initial.data_file = init.data_file
            else:
                initial.zero_data = True
    sb.iterative_sequence = spec.iterative_sequence


def router_config(router: RouterPlan, native: bool = False) -> mc.ModelConfig:
    """A router: one input, one output per consumer, GPU tensors kept on the GPU. Python backend
    (router_model.py), or with `native` the native router's backend (native_router.c)."""
    backend = NATIVE_ROUTER_BACKEND if native else "python"
    cfg = mc.ModelConfig(name=router.name, backend=backend, max_batch_size=router.max_batch_size)
    dtype = data_type(router.data_type)
    cfg.input.add(name=ROUTER_INPUT, data_type=dtype, dims=router.dims, optional=router.optional)
    for out, consumer in router.outputs:
        output = cfg.output.add(name=out, data_type=dtype, dims=router.dims)
        if router.labels is not None and consumer.step is None:  # a pipeline output: classes by name
            output.label_filename = router.labels[0]
    kind = mc.ModelInstanceGroup.KIND_GPU if router.gpu else mc.ModelInstanceGroup.KIND_CPU
    group = cfg.instance_group.add(kind=kind, count=1)
    if router.pinned_gpu is not None:
        group.gpus.append(router.pinned_gpu)
    if not native:  # the native router takes each tensor where it is anyway
        cfg.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = "no"
    return cfg


def open_streams_config(name: str) -> mc.ModelConfig:
    """The open-streams gauge (open_streams_model.py): one CPU instance, decoupled (Triton refuses it to
    unary inference, so only a stream registers), that counts the leases of the client helper's streams:
    LEASE (the lease ID) and OPEN (open or renew; false: close) in, the live leases and the lease time out."""
    cfg = mc.ModelConfig(name=name, backend="python", max_batch_size=0)
    cfg.input.add(name="LEASE", data_type=mc.TYPE_STRING, dims=[1])
    cfg.input.add(name="OPEN", data_type=mc.TYPE_BOOL, dims=[1])
    cfg.output.add(name="OPEN_STREAMS", data_type=mc.TYPE_INT32, dims=[1])
    cfg.output.add(name="LEASE_SECONDS", data_type=mc.TYPE_INT32, dims=[1])
    cfg.model_transaction_policy.decoupled = True
    cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    return cfg


def ensemble_config(plan: EnsemblePlan) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name=plan.name, platform="ensemble", max_batch_size=plan.max_batch_size)
    for name, t in plan.inputs:
        cfg.input.add(name=name, data_type=data_type(t.data_type), dims=t.full_dims, optional=t.optional)
    for name, t in plan.outputs:
        cfg.output.add(name=name, data_type=data_type(t.data_type), dims=t.full_dims)
    for step in plan.steps:
        s = cfg.ensemble_scheduling.step.add(model_name=step.model, model_version=step.version)
        for key, value in step.input_map:
            s.input_map[key] = value
        for key, value in step.output_map:
            s.output_map[key] = value
    return cfg


ORCHESTRATOR_PLAN = (
    "tritonpipeline.plan"  # the orchestrator's parameter holding its plan (branches.plan_json)
)


def orchestrator_config(plan: OrchestratorPlan, plan_text: str) -> mc.ModelConfig:
    """A conditional pipeline's orchestrator (orchestrator_model.py): the pipeline's interface, a Python
    BLS model on one CPU instance (it only calls ensembles; tensors pass through by DLPack, GPU ones stay
    on the GPU), dynamic batching when it batches, so that each branch is called once per batch."""
    cfg = mc.ModelConfig(name=plan.name, backend="python", max_batch_size=plan.max_batch_size)
    for name, t in plan.inputs:
        cfg.input.add(name=name, data_type=data_type(t.data_type), dims=t.full_dims, optional=t.optional)
    for o in plan.outputs:
        cfg.output.add(name=o.name, data_type=data_type(o.tensor.data_type), dims=o.tensor.full_dims)
    cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    if plan.sequence_idle_us:
        _orchestrator_sequences(cfg.sequence_batching, plan.sequence_idle_us)
    elif plan.max_batch_size > 0:
        cfg.dynamic_batching.SetInParent()
    if plan.decoupled:
        cfg.model_transaction_policy.decoupled = True
    cfg.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = "no"
    cfg.parameters[ORCHESTRATOR_PLAN].string_value = plan_text
    return cfg


ORCHESTRATOR_SEQUENCES = 1024  # sequences one orchestrator holds at once (they cost it a few bytes each)


def _orchestrator_sequences(sb: mc.ModelSequenceBatching, idle_us: int) -> None:
    """An orchestrator in front of a sequence step takes sequences itself: Triton then checks each
    request's correlation ID and START, hands it a sequence's requests one at a time and in order (the
    oldest strategy: at most one request of a sequence per batch), and it passes them on
    (orchestrator_model.py, sequence_flags). A sequence idles out after its steps' longest idle time."""
    sb.max_sequence_idle_microseconds = idle_us
    sb.oldest.max_candidate_sequences = ORCHESTRATOR_SEQUENCES


def switch_config(plan: SwitchPlan) -> mc.ModelConfig:
    """A conditional pipeline's native switch (native_router.c, compiler/switch_plan.py): the tensors its
    branches and conditions read in, every one optional (a request may leave an optional pipeline input
    out), the outputs it serves out, one CPU instance (it copies where each tensor is), its plan."""
    cfg = mc.ModelConfig(name=plan.name, backend=NATIVE_ROUTER_BACKEND, max_batch_size=plan.max_batch_size)
    for name, t in plan.inputs:
        cfg.input.add(name=name, data_type=data_type(t.data_type), dims=t.full_dims, optional=True)
    for name, t in plan.outputs:
        cfg.output.add(name=name, data_type=data_type(t.data_type), dims=t.full_dims)
    cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    cfg.parameters[SWITCH_PARAMETER].string_value = plan.plan
    return cfg
