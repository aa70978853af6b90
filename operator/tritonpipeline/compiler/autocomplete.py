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
for that call)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

PYTHON_MODEL_FILE = "model.py"  # the Python backend's default_model_filename
AUTO_COMPLETE = "auto_complete_config"  # the Python backend's hook (a static method of TritonPythonModel)
ADD_INPUT, ADD_OUTPUT = "add_input", "add_output"
SET_MAX_BATCH_SIZE = "set_max_batch_size"
SET_DYNAMIC_BATCHING = "set_dynamic_batching"
SET_POLICY = "set_model_transaction_policy"
CALLS = (ADD_INPUT, ADD_OUTPUT, SET_MAX_BATCH_SIZE, SET_DYNAMIC_BATCHING, SET_POLICY)
DECOUPLED = "decoupled"
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
    policy_line: int = 0
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
            if not (isinstance(value, dict) and isinstance(value.get("name"), str)):
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
            self.out.decoupled = decoupled
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
