"""A TritonPipeline mapping to the typed object (resource.py), every problem at its field path:
pydantic's errors in users' words, a value nested too deep to read, and the fields of a newer CRD
(reported, never refused, for what the API server stored)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .. import jsontext
from ..errors import Problem, SpecError, kind_of, plain_number, quote
from .base import FieldProblems
from .resource import TritonPipeline
from .yaml_reader import UNQUOTED_SCALAR

# a value the operator read no further (jsontext.py): it was nested deeper than any field of a pipeline is
NESTED_TOO_DEEP = (
    f"nested more than {jsontext.MAX_DEPTH} levels deep (mappings or lists inside one another); no field of "
    "a TritonPipeline is: this pipeline is not read"
)
MANAGED = ("metadata", "managedFields")  # the API server's record of who set what: it mirrors the object


def format_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """('spec', 'models', 0, 'name') -> 'spec.models[0].name'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _allowed_fields(model: type[BaseModel]) -> list[str]:
    return sorted((f.alias or n) for n, f in model.model_fields.items())


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Walk the model tree along a location to find which model class holds it."""
    current: Any = TritonPipeline
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next((f for n, f in current.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return current
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    while args:
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0]
        inner = [a for a in args if getattr(a, "__args__", None)]
        if not inner:
            break
        annotation = inner[0]
        args = getattr(annotation, "__args__", None)
    return annotation


def _message(err: ErrorDetails) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        owner = _model_at(tuple(err["loc"][:-1]))
        allowed = f" (allowed: {', '.join(_allowed_fields(owner))})" if owner else ""
        return f"unknown field{allowed}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected', '')}, got {quote(value)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected an integer, got {kind_of(value)} {quote(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"expected a number, got {kind_of(value)} {quote(value)}"
    if kind == "finite_number":
        return f"must be a finite number, got {quote(value)}"
    if kind in ("string_type",) and isinstance(value, (bool, int, float)):
        return f"expected a string, got {kind_of(value)} {quote(value)}{UNQUOTED_SCALAR}"
    if kind in ("string_type",):
        return f"expected a string, got {kind_of(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {kind_of(value)} {quote(value)}"
    if kind in ("list_type",):
        return f"expected a list, got {kind_of(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping, got {kind_of(value)}"
    if kind == "greater_than_equal":
        return f"must be >= {plain_number(ctx['ge'])}, got {quote(value)}"
    if kind == "greater_than":
        return f"must be > {plain_number(ctx['gt'])}, got {quote(value)}"
    if kind == "less_than_equal":
        return f"must be <= {plain_number(ctx['le'])}, got {quote(value)}"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"allows at most {ctx.get('max_length')} item(s)"
    if kind == "string_too_long":
        return f"allows at most {ctx.get('max_length')} characters"
    if kind in ("string_too_short",):
        return "must not be empty"
    return str(err["msg"])


# how pydantic names the members of a union (`int | float`) in an error's location: not a field
UNION_MEMBERS = frozenset({"bool", "int", "float", "str", "list", "dict"})


def _union_member(part: Any) -> bool:
    return isinstance(part, str) and (part in UNION_MEMBERS or "[" in part)


def _problems(exc: ValidationError) -> list[Problem]:
    found: list[Problem | tuple[Any, ...]] = []  # a problem, or a union's field (its members' errors below)
    unions: dict[tuple[Any, ...], list[ErrorDetails]] = {}
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        error = (err.get("ctx") or {}).get("error")
        if isinstance(error, FieldProblems):
            found += [Problem(format_path(loc) + sub, message) for sub, message in error.items]
        elif loc and _union_member(loc[-1]):
            if loc[:-1] not in unions:
                found.append(loc[:-1])
            unions.setdefault(loc[:-1], []).append(err)
        else:
            found.append(Problem(format_path(loc), _message(err)))
    return [
        p if isinstance(p, Problem) else Problem(format_path(p), _union_message(unions[p])) for p in found
    ]


def _union_message(errs: list[ErrorDetails]) -> str:
    """One message for the errors of a value no member of a field's union takes: what each expects (an
    integer and a number: a number), and what it got; else the members' messages, each once."""
    messages = [_message(e) for e in errs]
    if not all(m.startswith("expected ") and ", got " in m for m in messages):
        return "; ".join(dict.fromkeys(messages))
    wanted = list(dict.fromkeys(m.removeprefix("expected ").split(", got ")[0] for m in messages))
    if "a number" in wanted and "an integer" in wanted:
        wanted.remove("an integer")
    wanted = ["true/false" if w == "true or false" else w for w in wanted]
    value = errs[0].get("input")
    either = wanted[0] if len(wanted) == 1 else ", ".join(wanted[:-1]) + " or " + wanted[-1]
    return f"expected {either}, got {kind_of(value)} {quote(value)}"


# what a caller adds to the problems of a document that does not parse: the compiler's, where it can
# still read the graph (compiler.graph_problems_beside), so that every problem is reported at once
Beside = Callable[[dict[str, Any], list[Problem]], list[Problem]]


def parse_pipeline(
    doc: dict[str, Any],
    source: str | None = None,
    *,
    beside: Beside | None = None,
    newer: list[str] | None = None,
) -> TritonPipeline:
    """Validate one TritonPipeline mapping. Raises SpecError listing every problem found, and what
    `beside` finds too.

    With `newer` (for an object the API server stored or sends for admission): a field the schema does not
    know is no problem; it is left out and its path appended to `newer`. The API server prunes every field
    its CRD does not define, after defaulting, so such a field is one a newer CRD defines (applied before
    this operator was upgraded, or kept after a rollback): reported and ignored, never refused. A user's
    file (`validate`) has no `newer`: an unknown field there is a typo."""
    cut = [Problem(format_path(at), NESTED_TOO_DEEP) for at in jsontext.cut_paths(doc) if at[:2] != MANAGED]
    if cut:
        raise SpecError(cut, source)
    try:
        return TritonPipeline.model_validate(doc)
    except ValidationError as exc:
        unknown = [tuple(e["loc"]) for e in exc.errors(include_url=False) if e["type"] == "extra_forbidden"]
        known = _without(doc, unknown) if newer is not None and unknown else doc
        if newer is not None and known != doc:  # the rest is parsed again: its own problems are raised
            newer += [format_path(loc) for loc in unknown]
            return parse_pipeline(known, source, beside=beside, newer=newer)
        problems = _problems(exc)
        raise SpecError(problems + (beside(doc, problems) if beside else []), source) from None


def _without(value: Any, locs: list[tuple[Any, ...]]) -> Any:
    """`value` less what lies at each location (pydantic's, through mappings and lists), copied only along
    their paths."""
    if not locs:
        return value
    gone = {loc[0] for loc in locs if len(loc) == 1}
    below: dict[Any, list[tuple[Any, ...]]] = {}
    for loc in locs:
        if len(loc) > 1:
            below.setdefault(loc[0], []).append(loc[1:])
    if isinstance(value, Mapping):
        return {k: _without(v, below.get(k, [])) for k, v in value.items() if k not in gone}
    if isinstance(value, list):
        return [_without(v, below.get(i, [])) for i, v in enumerate(value)]
    return value


# What a pipeline says of the fields `parse_pipeline` put in `newer`: in its status and the webhook's warning
NEWER_FIELDS = (
    "defined by a newer CRD than this operator knows (the API server keeps only fields its CRD defines): "
    "this operator ignores them and serves the rest of the spec; they take effect once the operator of "
    "that CRD's release runs"
)


def newer_fields(paths: list[str]) -> str:
    """The paths `parse_pipeline` put in `newer`, each once, a list index as [*] (a CRD's default fills a
    field in every item): `spec.server.someSetting, spec.models[*].other`."""
    return ", ".join(dict.fromkeys(re.sub(r"\[\d+\]", "[*]", p) for p in paths))
