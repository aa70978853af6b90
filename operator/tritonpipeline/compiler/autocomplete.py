"""What a Python model's `auto_complete_config` sets, read from its source without running it (pure).

Triton's Python backend calls the model's `auto_complete_config(config)` at load time; a model may set its
transaction policy there (`config.set_model_transaction_policy({"decoupled": True})`: vLLM's model.py,
JetStream's). Triton keeps what config.pbtxt says and refuses a model whose auto-complete changes it
("trying to change decoupled property"), and the render writes the policy of every model a step runs, so
`import` must know it: this module finds the call and reads its literal value, or says where it is when
the value is computed."""

from __future__ import annotations

import ast
from dataclasses import dataclass

PYTHON_MODEL_FILE = "model.py"  # the Python backend's default_model_filename
AUTO_COMPLETE = "auto_complete_config"  # the Python backend's hook (a static method of TritonPythonModel)
SET_POLICY = "set_model_transaction_policy"
DECOUPLED = "decoupled"


@dataclass(frozen=True)
class PolicyCall:
    """A `set_model_transaction_policy` call in `auto_complete_config`: the `decoupled` value it sets
    (None: computed, not a literal) and its line."""

    decoupled: bool | None
    line: int


def transaction_policy(source: str) -> PolicyCall | None:
    """The last `set_model_transaction_policy` call of the source's `auto_complete_config`, or None when
    it makes none (or the source does not parse: Triton's own load reports that)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: PolicyCall | None = None
    for hook in ast.walk(tree):
        if not (isinstance(hook, ast.FunctionDef | ast.AsyncFunctionDef) and hook.name == AUTO_COMPLETE):
            continue
        bound = _literal_names(hook)
        for node in ast.walk(hook):
            if _is_policy_call(node):
                assert isinstance(node, ast.Call)
                arg = node.args[0] if node.args else (node.keywords[0].value if node.keywords else None)
                call = PolicyCall(_decoupled(arg, bound), node.lineno)
                if found is None or call.line > found.line:
                    found = call
    return found


def _is_policy_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == SET_POLICY
        and bool(node.args or node.keywords)
    )


def _literal_names(hook: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr | None]:
    """Names the hook assigns exactly once with a plain `name = value` (None: assigned otherwise too)."""
    names: dict[str, ast.expr | None] = {}
    for node in ast.walk(hook):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                names[target.id] = value if target.id not in names and len(targets) == 1 else None
    return names


def _decoupled(arg: ast.expr | None, bound: dict[str, ast.expr | None]) -> bool | None:
    """The literal `decoupled` of `{"decoupled": X}`, `dict(decoupled=X)` or a name bound once to either;
    None when it is not a literal."""
    if isinstance(arg, ast.Name):
        arg = bound.get(arg.id)
    value: ast.expr | None = None
    if isinstance(arg, ast.Dict):
        for key, item in zip(arg.keys, arg.values, strict=True):
            if key is None:  # `**other`: not a literal
                return None
            if isinstance(key, ast.Constant) and key.value == DECOUPLED:
                value = item
    elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "dict":
        if arg.args:  # dict(other, ...): not a literal
            return None
        for keyword in arg.keywords:
            if keyword.arg is None:
                return None
            if keyword.arg == DECOUPLED:
                value = keyword.value
    else:
        return None
    if value is None:  # the policy without `decoupled`: Triton's default
        return False
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    return None
