"""What a Python model's `auto_complete_config` sets, read from its source without running it (pure).

Triton's Python backend calls the model's `auto_complete_config(config)` at load time, and the model may
complete its config there: `add_input`, `add_output` (each added unless the config has a tensor of that
name), `set_max_batch_size` (raised to it), `set_dynamic_batching` (where no scheduler is set), and
`set_model_transaction_policy` (Triton refuses a model whose auto-complete changes a policy the config
sets: "trying to change decoupled property"). JetStream's, NVIDIA's tokenizer models and the
tutorials' GPT-2 do this, most with literal values: lists of dicts, sometimes bound to a name and added
in a loop guarded by `if tensor["name"] not in names`. `import` carries what such a model would be
loaded with, so a step can map its tensors and the render writes the same config; this module reads
those literal calls, and says where a call's value is computed or conditional (then nothing can be read
for that call). `complete` then does to a config what the Python backend does with those calls, and says
what the backend refuses, in its words (triton_python_backend_utils.ModelConfig): Triton then fails to
load the model."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from .triton_config import mc

PYTHON_MODEL_FILE = "model.py"  # the Python backend's default_model_filename
AUTO_COMPLETE = "auto_complete_config"  # the Python backend's hook (a static method of TritonPythonModel)
ADD_INPUT, ADD_OUTPUT = "add_input", "add_output"
SET_MAX_BATCH_SIZE = "set_max_batch_size"
SET_DYNAMIC_BATCHING = "set_dynamic_batching"
SET_POLICY = "set_model_transaction_policy"
CALLS = (ADD_INPUT, ADD_OUTPUT, SET_MAX_BATCH_SIZE, SET_DYNAMIC_BATCHING, SET_POLICY)
DECOUPLED = "decoupled"
POLICY_FIELD = "model_transaction_policy.decoupled"  # the config field set_model_transaction_policy sets
_UNKNOWN = object()  # a value the source does not spell out


@dataclass
class Completion:
    """The literal effect of one auto_complete_config, in call order. `unread`: (call, line) of each call
    whose value is computed or that runs only under a condition other than a not-yet-declared guard."""

    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    max_batch_size: int | None = None
    dynamic_batching: bool = False
    decoupled: bool | None = None  # what the last set_model_transaction_policy sets
    policy: dict[str, Any] | None = None  # the last policy set, as given
    policy_line: int = 0
    returns: bool = True  # the hook returns something (the backend refuses a hook that returns nothing)
    unread: list[tuple[str, int]] = field(default_factory=list)


def completion(source: str) -> Completion | None:
    """What the source's `auto_complete_config` sets; None when it has none that calls any of CALLS (or
    the source does not parse: Triton's own load reports that)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    hooks = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == AUTO_COMPLETE
    ]
    if not hooks or not any(_call_name(n) for hook in hooks for n in ast.walk(hook)):
        return None
    out = Completion()
    for hook in hooks:
        _Reader(out, _bound_once(hook)).block(hook.body, {}, guarded=True)
    out.returns = any(
        isinstance(node, ast.Return) and node.value is not None for hook in hooks for node in ast.walk(hook)
    )
    return out


def _call_name(node: ast.AST) -> str | None:
    """The method of one of CALLS that `node` calls, or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CALLS:
        return node.func.attr
    return None


def _bound_once(hook: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr | None]:
    """Names the hook binds exactly once, with a plain `name = value`, and never changes in place (None:
    bound otherwise too, or a method called on it, such as `inputs.append(...)`, or an item or attribute
    of it assigned)."""
    names: dict[str, ast.expr | None] = {}
    changed: set[str] = set()
    for node in ast.walk(hook):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            changed.add(_base_name(node.func.value))
        elif isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            changed.add(_base_name(node.value))
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.comprehension | ast.NamedExpr):
            targets = [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    once = name.id not in names and len(targets) == 1 and target is name
                    names[name.id] = value if once else None
    return {name: None if name in changed else value for name, value in names.items()}


def _base_name(node: ast.expr) -> str:
    """The name an expression such as `inputs[0]["dims"]` or `inputs.copy` starts from ("" if none)."""
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


@dataclass
class _Reader:
    out: Completion
    bound: dict[str, ast.expr | None]

    def block(self, body: list[ast.stmt], loops: dict[str, list[Any]], guarded: bool) -> None:
        """Statements in order; `loops` binds loop variables to the literal items they take; `guarded`:
        every condition around them is a not-yet-declared guard (else their calls are unread)."""
        for stmt in body:
            if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name):
                items = self.literal(stmt.iter, loops)
                if isinstance(items, list | tuple):
                    self.block(stmt.body, {**loops, stmt.target.id: list(items)}, guarded)
                else:
                    self.unread(stmt)
            elif isinstance(stmt, ast.If):
                ok = guarded and _is_guard(stmt.test)
                self.block(stmt.body, loops, ok)
                self.block(stmt.orelse, loops, False)
            elif isinstance(stmt, ast.With | ast.AsyncWith):
                self.block(stmt.body, loops, guarded)
            elif isinstance(stmt, ast.Expr) and _call_name(stmt.value) and guarded:
                assert isinstance(stmt.value, ast.Call)
                self.call(stmt.value, loops)
            else:
                self.unread(stmt)

    def unread(self, stmt: ast.stmt) -> None:
        """Every call of CALLS within `stmt` (one that is not a plain statement of the hook)."""
        for node in ast.walk(stmt):
            name = _call_name(node)
            if name:
                self.out.unread.append((name, getattr(node, "lineno", 0)))

    def call(self, node: ast.Call, loops: dict[str, list[Any]]) -> None:
        name = _call_name(node)
        assert name is not None
        args = [*node.args, *(k.value for k in node.keywords)]
        if name == SET_DYNAMIC_BATCHING:
            self.out.dynamic_batching = True
            return
        if len(args) != 1:
            self.out.unread.append((name, node.lineno))
            return
        arg = args[0]
        loop_var = arg.id if isinstance(arg, ast.Name) and arg.id in loops else None
        values = loops[loop_var] if loop_var else [self.literal(arg, loops)]
        for value in values:
            if not self.apply(name, value):
                self.out.unread.append((name, node.lineno))
                return
            if name == SET_POLICY:
                self.out.policy_line = node.lineno

    def apply(self, name: str, value: Any) -> bool:
        """Record one call's literal value; False when it is not one the call takes."""
        if name in (ADD_INPUT, ADD_OUTPUT):
            if not isinstance(value, dict):
                return False
            (self.out.inputs if name == ADD_INPUT else self.out.outputs).append(value)
        elif name == SET_MAX_BATCH_SIZE:
            if not (isinstance(value, int) and not isinstance(value, bool)):
                return False
            self.out.max_batch_size = value
        elif name == SET_POLICY:
            if not isinstance(value, dict):
                return False
            decoupled = value.get(DECOUPLED, False)  # a policy without it: Triton's default
            if not isinstance(decoupled, bool):
                return False
            self.out.decoupled, self.out.policy = decoupled, value
        return True

    def literal(self, node: ast.expr, loops: dict[str, list[Any]]) -> Any:
        """The Python value `node` spells out: constants, lists, tuples and dicts of them, `dict(k=v)`, a
        name the hook binds once to one of these; _UNKNOWN otherwise."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.literal(node.operand, loops)
            return -value if isinstance(value, int | float) and not isinstance(value, bool) else _UNKNOWN
        if isinstance(node, ast.List | ast.Tuple):
            items = [self.literal(e, loops) for e in node.elts]
            return _UNKNOWN if any(i is _UNKNOWN for i in items) else items
        if isinstance(node, ast.Dict):
            pairs = []
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:  # `**other`
                    return _UNKNOWN
                pairs.append((self.literal(key, loops), self.literal(value, loops)))
            if any(k is _UNKNOWN or v is _UNKNOWN or not isinstance(k, str) for k, v in pairs):
                return _UNKNOWN
            return dict(pairs)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            if node.args or any(k.arg is None for k in node.keywords):
                return _UNKNOWN
            kwargs = {k.arg: self.literal(k.value, loops) for k in node.keywords if k.arg is not None}
            return _UNKNOWN if any(v is _UNKNOWN for v in kwargs.values()) else kwargs
        if isinstance(node, ast.Name) and node.id not in loops:
            value = self.bound.get(node.id)
            return self.literal(value, loops) if value is not None else _UNKNOWN
        return _UNKNOWN


def _is_guard(test: ast.expr) -> bool:
    """`if X not in NAMES:`: the tutorials' "add only what the config does not declare" (what add_input
    does by name anyway)."""
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn)


# --------------------------------------------------------------------------- what the backend does with it

INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")  # what add_input takes
OUTPUT_PROPERTIES = ("name", "data_type", "dims")  # what add_output takes
POLICY_PROPERTIES = (DECOUPLED,)  # what set_model_transaction_policy takes
# the Python backend's words for what it refuses (triton_python_backend_utils, pb_stub)
NO_RETURN = "auto_complete_config function in model '{model}' must return a valid pb.ModelConfig object"
_IN_HOOK = "in auto-complete-config function for model '{model}'"
TENSOR_PROPERTY = "{kind} '{name}' " + _IN_HOOK + " contains property other than {listed}."
TENSOR_MISSING = "{which} " + _IN_HOOK + " is missing '{required}' property."
TENSOR_TYPE = (
    "unable to load model '{model}', configuration expects datatype {have} for {kind} '{name}', model "
    "provides {given}"
)
TENSOR_DIMS = (
    "model '{model}', tensor '{name}': the model expects dims {given} but the model configuration "
    "specifies dims {have}"
)
TENSOR_OPTIONAL = (
    "model '{model}', tensor '{name}': the model expects optional {given} but the model configuration "
    "specifies optional {have}"
)
MAX_BATCH_LOWER = (
    "configuration specified max_batch_size {have}, but " + _IN_HOOK + " specified max_batch_size {given}"
)
SCHEDULER_SET = (
    "Configuration specified scheduling_choice as '{scheduler}', but auto-complete-config function for "
    "model '{model}' tries to set scheduling_choice as 'dynamic_batching'"
)
POLICY_PROPERTY = "model transaction property " + _IN_HOOK + " contains property other than 'decoupled'."
DECOUPLED_CHANGE = (
    "trying to change decoupled property in auto-complete-config for model '{model}', which is already "
    "set to '{have}'."
)


@dataclass(frozen=True)
class Refusal:
    """One call the Python backend refuses: `field` is the config field it concerns (input, output,
    max_batch_size, sequence_batching, model_transaction_policy.decoupled; "" for the hook itself), `why`
    the backend's words."""

    call: str
    field: str
    why: str


def complete(cfg: mc.ModelConfig, done: Completion) -> list[Refusal]:
    """Complete `cfg` in place with what `done` sets, as the Python backend does when Triton loads the
    model: tensors added by name (a declared one's missing data type and dims filled in), max_batch_size
    raised, dynamic batching where no scheduler is set, the transaction policy; what it refuses instead."""
    refusals = [] if done.returns else [Refusal(AUTO_COMPLETE, "", NO_RETURN.format(model=cfg.name))]
    for kind, call, tensors, allowed in (
        ("input", ADD_INPUT, done.inputs, INPUT_PROPERTIES),
        ("output", ADD_OUTPUT, done.outputs, OUTPUT_PROPERTIES),
    ):
        for tensor in tensors:
            why = _add_tensor(cfg, kind, tensor, allowed)
            if why:
                refusals.append(Refusal(call, kind, why))
    if done.max_batch_size is not None:
        if cfg.max_batch_size > done.max_batch_size:
            why = MAX_BATCH_LOWER.format(have=cfg.max_batch_size, model=cfg.name, given=done.max_batch_size)
            refusals.append(Refusal(SET_MAX_BATCH_SIZE, "max_batch_size", why))
        else:
            cfg.max_batch_size = done.max_batch_size
    if done.dynamic_batching:
        scheduler = cfg.WhichOneof("scheduling_choice")
        if scheduler in ("sequence_batching", "ensemble_scheduling"):
            why = SCHEDULER_SET.format(scheduler=scheduler, model=cfg.name)
            refusals.append(Refusal(SET_DYNAMIC_BATCHING, str(scheduler), why))
        else:
            cfg.dynamic_batching.SetInParent()
    if done.policy is not None:
        refusals += _set_policy(cfg, done.policy)
    return refusals


def _add_tensor(cfg: mc.ModelConfig, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> str:
    """add_input/add_output of `tensor` to cfg's `kind` list; the backend's words when it refuses it."""
    name = tensor.get("name")
    model = cfg.name
    if any(key not in allowed for key in tensor):
        listed = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
        return TENSOR_PROPERTY.format(kind=kind, name=name, model=model, listed=listed)
    for required in ("name", "data_type", "dims"):
        if required not in tensor:
            which = f"{kind} '{name}'" if required != "name" else kind
            return TENSOR_MISSING.format(which=which, model=model, required=required)
    declared = getattr(cfg, kind)
    same = next((t for t in declared if t.name == name), None)
    if same is not None:
        have = mc.DataType.Name(same.data_type)
        if same.data_type != mc.TYPE_INVALID and have != tensor["data_type"]:
            return TENSOR_TYPE.format(model=model, have=have, kind=kind, name=name, given=tensor["data_type"])
        if same.dims and list(same.dims) != tensor["dims"]:
            return TENSOR_DIMS.format(model=model, name=name, given=tensor["dims"], have=list(same.dims))
        if kind == "input" and "optional" in tensor and tensor["optional"] != same.optional:
            optional = tensor["optional"]
            return TENSOR_OPTIONAL.format(model=model, name=name, given=optional, have=same.optional)
    message = mc.ModelInput if kind == "input" else mc.ModelOutput
    try:
        given: Any = json_format.ParseDict(tensor, message())
    except json_format.ParseError as exc:  # Triton reads the completed config back from JSON
        return f"{kind} '{name}': {exc}"
    if same is None:
        declared.append(given)
    else:
        same.data_type = given.data_type
        same.dims[:] = given.dims
        if "optional" in tensor:
            same.optional = given.optional
    return ""


def _set_policy(cfg: mc.ModelConfig, policy: dict[str, Any]) -> list[Refusal]:
    """set_model_transaction_policy(policy) on cfg; the backend's words when it refuses it."""
    if any(key not in POLICY_PROPERTIES for key in policy):
        why = POLICY_PROPERTY.format(model=cfg.name)
        return [Refusal(SET_POLICY, "model_transaction_policy", why)]
    had = cfg.HasField("model_transaction_policy")
    cfg.model_transaction_policy.SetInParent()
    if DECOUPLED in policy:
        current = cfg.model_transaction_policy.decoupled
        if had and current != policy[DECOUPLED]:
            why = DECOUPLED_CHANGE.format(model=cfg.name, have=current)
            return [Refusal(SET_POLICY, POLICY_FIELD, why)]
        cfg.model_transaction_policy.decoupled = policy[DECOUPLED]
    return []
