"""The section mappers of a model's config: backend or platform, tensors, instance groups, the batchers,
sequence controls and states, parameters, what a model.py completes, and extraConfig."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, get_args

from pydantic import BaseModel

from ..compiler.autocomplete import POLICY_FIELD, PYTHON_MODEL_FILE, SET_POLICY, complete, completion
from ..compiler.triton_config import SPEC_RENDERED, mc, to_text
from ..spec import (
    DECOUPLED_BACKENDS,
    PLATFORM_BACKEND,
    Controls,
    DynamicBatching,
    InputTensor,
    Instance,
    Model,
    OutputTensor,
    Platform,
    PriorityQueuePolicy,
    QueuePolicy,
    RateLimiter,
    RateLimiterResource,
    SequenceBatching,
    State,
    VersionPolicy,
)
from .findings import (
    BACKEND_MISMATCH,
    COMPLETED,
    COMPLETED_FROM,
    COMPLETION_REFUSED,
    COMPLETION_UNREAD,
    CONTROL_MIXED,
    CONTROL_NOT_CARRIED,
    CONTROL_REFUSED,
    CONTROL_TWICE,
    ERROR,
    NO_BACKEND,
    NO_CONFIG_CARRIED,
    NO_MODEL_FILE,
    NO_MODEL_FILE_NAMED,
    NO_VERSION_DIR,
    NOT_CARRIED,
    PARTIAL_TENSOR,
    POLICY_LEFT_TO_BACKEND,
    TRITON_CORRID_WITH_VALUES,
    TRITON_FLAG_VALUES_NOT_TWO,
    TRITON_FLAG_WITH_TWO_LISTS,
    TRITON_FLAG_WITHOUT_VALUES,
    WARNING,
    Finding,
)
from .reading import Reading, copy_rows, map_key, nested_model, same_as_defaults, spec_field_of, spec_order
from .tables import (
    BOOLEAN_CONTROLS,
    CONTROL,
    CORRID_CONTROL,
    CORRID_TYPE,
    CUSTOM_BACKEND_SEPARATOR,
    DIRECT_FIELDS,
    DYNAMIC_BATCHING_FIELDS,
    FLAG_TYPE,
    FLAG_VALUES,
    INITIAL_STATE_FIELDS,
    INPUT_FIELDS,
    INSTANCE_FIELDS,
    MODEL_FIELDS,
    MODEL_FILE_NAMES,
    MODEL_FILES,
    OLDEST_FIELDS,
    OUTPUT_FIELDS,
    OWN_DEFAULT_IS_MODEL_DOT_BACKEND,
    QUEUE_POLICY_FIELDS,
    RATE_LIMITER_FIELDS,
    RESOURCE_FIELDS,
    SEQUENCE_FIELDS,
    STATE_FIELDS,
    VERSION_POLICY_FIELDS,
    PythonFiles,
    VersionFiles,
    spec_data_type,
)
from .walk import one_line, untaken


def model_entry(
    cfg: Any,
    r: Reading,
    version_files: VersionFiles | None,
    python_files: PythonFiles | None = None,
    *,
    run_by_step: bool = False,
) -> dict[str, Any]:
    """The spec's model entry of one (non-ensemble) config; `version_files`: its first subdirectory and
    what that holds, None when it has none; `python_files`: the Python files of the version Triton
    loads; `run_by_step`: an ensemble step runs the model. A config without inputs or outputs (the
    backend completes them when Triton loads it) is carried without them."""
    entry: dict[str, Any] = {"name": cfg.name}
    r.take("name", "name")
    entry.update(_backend(cfg, r, version_files))
    if entry.get("backend") == "python":  # the config as the Python backend completes it
        _complete(cfg, r, python_files or {}, run_by_step=run_by_step)
    entry.update(copy_rows(r, cfg, MODEL_FIELDS, Model, "", ""))
    backend = entry.get("backend")
    if backend in DECOUPLED_BACKENDS and not cfg.HasField("model_transaction_policy"):
        entry["decoupled"] = True  # as the backend completes it when Triton loads the model
    elif backend in DECOUPLED_BACKENDS and not cfg.model_transaction_policy.decoupled and not run_by_step:
        how = f"backend {backend!r}: {DECOUPLED_BACKENDS[backend]}"
        r.add(NOT_CARRIED, POLICY_FIELD, POLICY_LEFT_TO_BACKEND.format(how=how, why=""))
    whole = {kind: _whole_tensors(cfg, kind, r) for kind in ("input", "output")}
    if cfg.input:
        entry["inputs"] = [
            spec_order(
                copy_rows(r, t, INPUT_FIELDS, InputTensor, f"input[{i}].", f"inputs[{i}]"), InputTensor
            )
            for i, t in whole["input"]
        ]
    if cfg.output:
        entry["outputs"] = [
            spec_order(
                copy_rows(r, t, OUTPUT_FIELDS, OutputTensor, f"output[{i}].", f"outputs[{i}]"), OutputTensor
            )
            for i, t in whole["output"]
        ]
    for i in range(len(cfg.input)):
        r.origin[f"inputs[{i}]"] = f"input[{i}]"
    for i in range(len(cfg.output)):
        r.origin[f"outputs[{i}]"] = f"output[{i}]"
    if cfg.instance_group:
        entry["instances"] = [_instance(g, i, r) for i, g in enumerate(cfg.instance_group)]
    if cfg.HasField("dynamic_batching"):
        r.see("dynamic_batching", "dynamicBatching")
        entry["dynamicBatching"] = spec_order(
            copy_rows(
                r,
                cfg.dynamic_batching,
                DYNAMIC_BATCHING_FIELDS,
                DynamicBatching,
                "dynamic_batching.",
                "dynamicBatching",
            ),
            DynamicBatching,
        )
        entry["dynamicBatching"].update(_queue_policies(cfg.dynamic_batching, r))
    if cfg.HasField("version_policy"):
        policy = _version_policy(cfg.version_policy, r)
        if policy is not None:
            entry["versionPolicy"] = policy
    if cfg.HasField("sequence_batching"):
        entry["sequenceBatching"] = _sequence_batching(cfg.sequence_batching, r)
    if cfg.parameters:
        entry["parameters"] = _parameters(cfg, r)
    same_as_defaults(cfg, r)
    entry.update(_extra_config(cfg, r))
    return spec_order(entry, Model)


def _extra_config(cfg: Any, r: Reading) -> dict[str, str]:
    """extraConfig: each field of the config that the spec's own fields do not render, whole, where it
    holds anything more than NORMALISATIONS' defaults (the fields below the rendered ones that the spec
    does not carry stay NOT_CARRIED findings)."""
    left = {re.split(r"[.\[]", path, maxsplit=1)[0] for path, _ in untaken(cfg, "", r)}
    extra = type(cfg)()
    extra.CopyFrom(cfg)
    for fd, _ in extra.ListFields():
        if fd.name in SPEC_RENDERED or fd.name not in left:
            extra.ClearField(fd.name)
        else:
            r.take(fd.name, "extraConfig")
    return {"extraConfig": to_text(extra).decode()} if extra.ListFields() else {}


def _complete(cfg: Any, r: Reading, files: PythonFiles, *, run_by_step: bool) -> None:
    """Complete a Python model's config with what its auto_complete_config sets, as the Python backend
    does when Triton loads it (autocomplete.complete). What cannot be read, or what the backend would
    refuse, is a WARNING; a `decoupled: false` it contradicts on a model no step runs is NOT_CARRIED (the
    render leaves that model's policy to the backend)."""
    name = str(cfg.default_model_filename) or PYTHON_MODEL_FILE
    source = files.get(name)
    done = completion(source) if source is not None else None
    if done is None:
        return
    for call, line in done.unread:
        r.add(WARNING, "", COMPLETION_UNREAD.format(file=name, call=call, line=line, model=cfg.name))
    before = type(cfg)()
    before.CopyFrom(cfg)
    for refused in complete(cfg, done):
        why = refused.why + (f" (line {done.policy_line})" if refused.call == SET_POLICY else "")
        if refused.field == POLICY_FIELD and done.decoupled and not run_by_step:
            how = f"{name}'s auto_complete_config, line {done.policy_line}"
            r.add(NOT_CARRIED, refused.field, POLICY_LEFT_TO_BACKEND.format(how=how, why=f": {refused.why}"))
            continue
        r.add(WARNING, refused.field, COMPLETION_REFUSED.format(file=name, call=refused.call, why=why))
    what = _completed_parts(before, cfg)
    if what:
        r.add(COMPLETED, "", COMPLETED_FROM.format(what="; ".join(what), file=name))


def _completed_parts(before: Any, after: Any) -> list[str]:
    """What completing a config changed, in words: the tensors added or filled in, and the settings."""
    parts = []
    for kind in ("input", "output"):
        old = {t.name: t for t in getattr(before, kind)}
        changed = [t.name for t in getattr(after, kind) if old.get(t.name) != t]
        if changed:
            parts.append(f"{kind}s {', '.join(changed)}")
    if after.max_batch_size != before.max_batch_size:
        parts.append(f"max_batch_size {after.max_batch_size}")
    if after.HasField("dynamic_batching") and not before.HasField("dynamic_batching"):
        parts.append("dynamic batching")
    if after.model_transaction_policy.decoupled and not before.model_transaction_policy.decoupled:
        parts.append("decoupled: true")
    return parts


def _whole_tensors(cfg: Any, kind: str, r: Reading) -> list[tuple[int, Any]]:
    """The config's inputs or outputs (`kind`) with their index, each one naming a data type and dims;
    one that leaves either to the backend (DALI's partial auto-configuration) is an ERROR."""
    whole = []
    for i, t in enumerate(getattr(cfg, kind)):
        missing = [what for what, absent in (("data_type", not t.data_type), ("dims", not t.dims)) if absent]
        if missing:
            message = PARTIAL_TENSOR.format(name=str(t.name), missing=" and ".join(missing), model=cfg.name)
            r.add(ERROR, f"{kind}[{i}]", message)
        else:
            whole.append((i, t))
    return whole


def _queue_policies(db: Any, r: Reading) -> dict[str, Any]:
    """The default queue policy and those of particular priority levels (Triton's map, the spec's list)."""
    prefix, spec = "dynamic_batching.", "dynamicBatching"
    out: dict[str, Any] = {}
    if db.HasField("default_queue_policy"):
        path = prefix + "default_queue_policy"
        r.see(path, f"{spec}.defaultQueuePolicy")
        found = copy_rows(r, db.default_queue_policy, QUEUE_POLICY_FIELDS, QueuePolicy, path + ".", spec)
        out["defaultQueuePolicy"] = spec_order(found, QueuePolicy)
    policies = []
    for k, level in enumerate(sorted(db.priority_queue_policy)):
        path, at = f"{prefix}priority_queue_policy{map_key(level)}", f"{spec}.priorityQueuePolicies[{k}]"
        r.see(path, at)
        found = copy_rows(
            r, db.priority_queue_policy[level], QUEUE_POLICY_FIELDS, QueuePolicy, path + ".", at
        )
        policies.append(spec_order({"priorityLevel": int(level), **found}, PriorityQueuePolicy))
    if policies:
        out["priorityQueuePolicies"] = policies
    return out


def _version_policy(vp: Any, r: Reading) -> dict[str, Any] | None:
    """Triton's version_policy; None for its default (latest 1), which the spec writes by leaving it out."""
    choice = vp.WhichOneof("policy_choice")
    if choice == "latest" and vp.latest.num_versions in (0, 1):
        return None  # the default: reported as a normalisation
    r.see("version_policy", "versionPolicy")
    r.see(f"version_policy.{choice}")
    found = copy_rows(r, vp, VERSION_POLICY_FIELDS, VersionPolicy, "version_policy.", "versionPolicy")
    return spec_order({"policy": choice, **found}, VersionPolicy)


def _model_file_backend(cfg: Any, version_files: VersionFiles | None) -> tuple[dict[str, str], bool]:
    """The backend Triton picks for a config that names none ({} when it picks none), and whether by the
    model's name (`model.<backend>`) rather than by a model file (MODEL_FILES)."""
    given = str(cfg.default_model_filename)
    files = version_files[1] if version_files is not None else {}
    for name, key, value, is_dir in MODEL_FILES:
        if given == name or (not given and name in files and is_dir in (None, files[name])):
            return {key: value}, False
    _, dot, custom = str(cfg.name).partition(CUSTOM_BACKEND_SEPARATOR)
    if dot and custom and not given:
        return {"backend": custom}, True
    return {}, False


def without_config(directory: str, version_files: VersionFiles | None) -> Finding | str:
    """A model directory without config.pbtxt, as Triton loads it (core's AutoCompleteBackendFields on an
    empty config named after the directory): the note that it is carried so, or why Triton cannot."""
    picked, by_name = _model_file_backend(mc.ModelConfig(name=directory), version_files)
    if not picked:
        if version_files is None:
            return NO_VERSION_DIR
        return NO_MODEL_FILE.format(subdir=version_files[0], files=MODEL_FILE_NAMES)
    ((key, value),) = picked.items()
    subdir = version_files[0] if version_files is not None else ""
    file = (
        f"its name {directory!r}"
        if by_name
        else next(f"{subdir}/{name}" for name, k, v, _ in MODEL_FILES if (k, v) == (key, value))
    )
    message = NO_CONFIG_CARRIED.format(field=key, value=value, file=file, model=directory)
    return Finding(COMPLETED, directory, "", message)


def _backend(cfg: Any, r: Reading, version_files: VersionFiles | None) -> dict[str, str]:
    """backend or platform: the spec takes exactly one (Triton's pick by the model file when neither)."""
    platform, backend = str(cfg.platform), str(cfg.backend)
    known = platform in get_args(Platform)
    if platform and backend:
        if PLATFORM_BACKEND.get(platform) == backend:
            r.take("backend")
        elif known:
            r.take("backend")
            r.add(NOT_CARRIED, "backend", BACKEND_MISMATCH.format(backend=backend, platform=platform))
        else:  # a platform the spec does not know, with a backend it can carry
            r.take("backend", "backend")
            return {"backend": backend}
    if platform:
        r.take("platform", "platform")
        return {"platform": platform}
    if backend:
        r.take("backend", "backend")
        return {"backend": backend}
    picked, by_name = _model_file_backend(cfg, version_files)
    if picked:
        r.take("backend", next(iter(picked)))  # NORMALISATIONS: Triton picks the same by the same file
        custom = picked.get("backend", "")
        if by_name and custom not in OWN_DEFAULT_IS_MODEL_DOT_BACKEND:
            cfg.default_model_filename = f"model.{custom}"  # as Triton sets it; carried in extraConfig
        return picked
    files = MODEL_FILE_NAMES
    why = NO_VERSION_DIR
    if cfg.default_model_filename:
        why = NO_MODEL_FILE_NAMED.format(given=str(cfg.default_model_filename), files=files)
    elif version_files is not None:
        why = NO_MODEL_FILE.format(subdir=version_files[0], files=files)
    r.add(ERROR, "backend", NO_BACKEND.format(why=why))
    return {}


def _instance(group: Any, i: int, r: Reading) -> dict[str, Any]:
    path = f"instance_group[{i}]"
    r.origin[f"instances[{i}]"] = path
    if group.name == f"{r.model}_{i}":  # Triton's own name for it
        r.take(f"{path}.name")
    out = copy_rows(r, group, INSTANCE_FIELDS, Instance, path + ".", f"instances[{i}]")
    if group.HasField("rate_limiter"):
        out["rateLimiter"] = _rate_limiter(group.rate_limiter, r, path + ".rate_limiter", f"instances[{i}]")
    return spec_order(out, Instance)


def _rate_limiter(limiter: Any, r: Reading, path: str, at: str) -> dict[str, Any]:
    """An instance group's rate limiter: its resources, and its priority."""
    spec = f"{at}.rateLimiter"
    r.see(path, spec)
    out = copy_rows(r, limiter, RATE_LIMITER_FIELDS, RateLimiter, path + ".", spec)
    resources = []
    for k, resource in enumerate(limiter.resources):
        rpath, rspec = f"{path}.resources[{k}]", f"{spec}.resources[{k}]"
        r.see(rpath, rspec)
        resources.append(copy_rows(r, resource, RESOURCE_FIELDS, RateLimiterResource, rpath + ".", rspec))
    if resources:
        out["resources"] = resources
    return spec_order(out, RateLimiter)


def _sequence_batching(sb: Any, r: Reading) -> dict[str, Any]:
    prefix, spec = "sequence_batching.", "sequenceBatching"
    r.see("sequence_batching", spec)
    out = copy_rows(r, sb, SEQUENCE_FIELDS, SequenceBatching, prefix, spec)
    if sb.HasField("oldest"):
        r.see(prefix + "oldest", spec + ".strategy")
        out["strategy"] = "oldest"
        out.update(copy_rows(r, sb.oldest, OLDEST_FIELDS, SequenceBatching, prefix + "oldest.", spec))
    elif sb.HasField("direct"):
        r.see(prefix + "direct", spec + ".strategy")
        out.update(copy_rows(r, sb.direct, DIRECT_FIELDS, SequenceBatching, prefix + "direct.", spec))
    controls = _controls(sb, r)
    if controls:
        out["controls"] = controls
        r.origin[spec + ".controls"] = prefix + "control_input"
    if sb.state:
        r.origin[spec + ".states"] = prefix + "state"
        out["states"] = [_state(st, k, r) for k, st in enumerate(sb.state)]
    return spec_order(out, SequenceBatching)


def _state(st: Any, k: int, r: Reading) -> dict[str, Any]:
    path, spec = f"sequence_batching.state[{k}]", f"sequenceBatching.states[{k}]"
    r.origin[spec] = path
    out = copy_rows(r, st, STATE_FIELDS, State, path + ".", spec)
    initial = nested_model(spec_field_of(State, "initialState").annotation)
    if initial is not None and len(st.initial_state) == 1:  # more than one: reported (Triton takes one)
        r.see(f"{path}.initial_state[0]", f"{spec}.initialState")
        found = copy_rows(
            r,
            st.initial_state[0],
            INITIAL_STATE_FIELDS,
            initial,
            f"{path}.initial_state[0].",
            f"{spec}.initialState",
        )
        out["initialState"] = spec_order(found, initial)
    return spec_order(out, State)


def _controls(sb: Any, r: Reading) -> dict[str, str]:
    """START/END/READY with one of the false/true lists the render writes, all of one data type the spec
    knows, and CORRID of a data type the spec knows: the spec's controls; any other is reported."""
    flag_types = _literal_values(Controls, FLAG_TYPE) or ["INT32"]  # what the spec (as it is) carries
    corrid_types = _literal_values(Controls, CORRID_TYPE) or ["UINT64"]
    out: dict[str, str] = {}
    first: dict[str, str] = {}
    flag: tuple[str, str] | None = None  # (data type, where) of the first carried START/END/READY
    seen: dict[str, str] = {}  # Triton's control kind -> where the config first gives it
    for i, ci in enumerate(sb.control_input):
        path = f"sequence_batching.control_input[{i}]"
        for j, control in enumerate(ci.control):
            # a control input of one control is one setting: reported whole when not carried
            cpath = f"{path}.control[{j}]" if len(ci.control) > 1 else path
            r.take(cpath)
            shown = {"name": str(ci.name), "control": one_line(control)}
            key, dtype = _control_type(control)
            refused = _control_refused(control)
            if refused:
                r.add(ERROR, cpath, CONTROL_REFUSED.format(**shown, words=refused))
                continue
            kind = str(CONTROL.Kind.Name(control.kind))
            if kind in seen:
                r.add(ERROR, cpath, CONTROL_TWICE.format(kind=kind, first=seen[kind]))
                continue
            seen[kind] = cpath
            if key is None or dtype not in (flag_types if key != CORRID_CONTROL else corrid_types):
                message = CONTROL_NOT_CARRIED.format(
                    **shown, flags=_or(flag_types), corrids=_or(corrid_types)
                )
            elif key != CORRID_CONTROL and flag is not None and dtype != flag[0]:
                message = CONTROL_MIXED.format(**shown, first=flag[0], where=flag[1])
            else:
                out[key] = str(ci.name)
                first[key] = cpath
                r.take(f"{path}.name", f"sequenceBatching.controls.{key}")
                if key == CORRID_CONTROL:
                    out[CORRID_TYPE] = dtype
                elif flag is None:
                    flag = (dtype, cpath)
                    out[FLAG_TYPE] = dtype
                continue
            r.add(NOT_CARRIED, cpath, message)
        r.take(f"{path}.name")  # its controls are reported one by one
    for alias in (FLAG_TYPE, CORRID_TYPE):  # the spec's defaults are left out
        if alias in out and out[alias] == spec_field_of(Controls, alias).default:
            del out[alias]
    return out


def _control_refused(control: Any) -> str | None:
    """Triton's words for a sequence control it refuses whatever the spec carries (core's
    GetBooleanSequenceControlProperties and GetTypedSequenceControlProperties); None when it takes it."""
    lists = [name for name in FLAG_VALUES if getattr(control, name)]
    if control.kind not in BOOLEAN_CONTROLS:
        return TRITON_CORRID_WITH_VALUES if lists else None
    if not lists:
        return TRITON_FLAG_WITHOUT_VALUES
    if len(lists) > 1:
        return TRITON_FLAG_WITH_TWO_LISTS
    if len(getattr(control, lists[0])) != 2:
        return TRITON_FLAG_VALUES_NOT_TWO.format(field=lists[0])
    return None


def _control_type(control: Any) -> tuple[str | None, str]:
    """A control's spec field and data type: ('start', 'INT32') for a START control with
    int32_false_true [0, 1], ('correlationId', 'UINT64') for a UINT64 CORRID; (None, '') otherwise."""
    lists = {name: list(getattr(control, name)) for name in FLAG_VALUES if getattr(control, name)}
    if control.kind in BOOLEAN_CONTROLS:
        if control.data_type or len(lists) != 1:
            return None, ""
        ((name, values),) = lists.items()
        dtype, wanted = FLAG_VALUES[name]
        return (BOOLEAN_CONTROLS[control.kind], dtype) if values == wanted else (None, "")
    if control.kind == CONTROL.CONTROL_SEQUENCE_CORRID and not lists:
        return CORRID_CONTROL, spec_data_type(control.data_type)
    return None, ""


def _literal_values(owner: type[BaseModel], alias: str) -> list[str]:
    """The values a Literal spec field allows."""
    return [str(v) for v in get_args(spec_field_of(owner, alias).annotation)]


def _or(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]


def _parameters(cfg: Any, r: Reading) -> dict[str, str]:
    """string_value of each parameter, verbatim (template placeholders such as ${engine_dir} included)."""
    out: dict[str, str] = {}
    for key in sorted(cfg.parameters):
        path = f"parameters{map_key(key)}.string_value"
        out[key] = str(cfg.parameters[key].string_value)
        r.take(path, f"parameters.{key}")
    return out
