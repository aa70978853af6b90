"""One config being mapped (`Reading`: what the mapper took, where each spec field came from, what it
found) and the rows of a table carried from a message into spec fields (`copy_rows`)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel

from .findings import Finding
from .tables import DEFAULTS, SAME_AS, Carry


@dataclass
class Reading:
    """One config being mapped: what the mapper took, where each spec field came from, what it found."""

    model: str
    taken: set[str] = field(default_factory=set)  # Triton field paths carried, with all below them
    seen: set[str] = field(default_factory=set)  # messages whose presence is carried; their fields are walked
    origin: dict[str, str] = field(default_factory=dict)  # spec path (relative) -> Triton field path
    findings: list[Finding] = field(default_factory=list)

    def take(self, path: str, spec_path: str | None = None) -> None:
        self.taken.add(path)
        self.seen.update(_parents(path))
        if spec_path is not None:
            self.origin[spec_path] = path

    def see(self, path: str, spec_path: str | None = None) -> None:
        self.seen.update([path, *_parents(path)])
        if spec_path is not None:
            self.origin[spec_path] = path

    def touched(self, path: str) -> bool:
        """Whether the mapper took or saw anything at or below `path`."""
        if path in self.seen or path in self.taken:
            return True
        return any(p.startswith((path + ".", path + "[")) for p in (*self.taken, *self.seen))

    def add(self, kind: str, path: str, message: str) -> None:
        self.findings.append(Finding(kind, self.model, path, message))


def _parents(path: str) -> list[str]:
    """'a.b[2].c' -> ['a', 'a.b', 'a.b[2]']."""
    return [path[: m.start()] for m in re.finditer(r"\.|\[", path) if m.start() > 0]


def _pattern(path: str) -> str:
    return re.sub(r"\[\d+\]", "[*]", path)


def has_field(msg: Message, name: str) -> bool:
    fd = msg.DESCRIPTOR.fields_by_name[name]
    if fd.is_repeated:
        return len(getattr(msg, name)) > 0
    if fd.type == FieldDescriptor.TYPE_MESSAGE or fd.has_presence:
        return msg.HasField(name)
    return bool(getattr(msg, name) != fd.default_value)


def _get(msg: Message, dotted: str) -> tuple[Any, bool]:
    """The value at a dotted field path below `msg`, and whether the config sets it."""
    *parents, last = dotted.split(".")
    for part in parents:
        if not msg.HasField(part):
            return None, False
        msg = getattr(msg, part)
    return getattr(msg, last), has_field(msg, last)


def map_key(key: Any) -> str:
    return f"[{json.dumps(key, ensure_ascii=False)}]"


def spec_field_of(owner: type[BaseModel], alias: str) -> Any:
    """The pydantic field of `owner` spelled `alias` in the YAML (a table row naming another is a bug)."""
    found = next((f for n, f in owner.model_fields.items() if (f.alias or n) == alias), None)
    if found is None:
        raise KeyError(f"{owner.__name__} has no field {alias!r}")
    return found


def copy_rows(
    r: Reading, msg: Message, rows: Sequence[Carry], owner: type[BaseModel], triton: str, spec: str
) -> dict[str, Any]:
    """The spec fields of `owner` that the `rows` carry from `msg` (at Triton path prefix `triton`, spec
    path prefix `spec`); defaults left out unless a row says `always`."""
    out: dict[str, Any] = {}
    for row in rows:
        spec_field = spec_field_of(owner, row.spec)
        path = triton + row.triton
        r.seen.update(_parents(path))  # a message holding only defaults of carried fields is carried too
        raw, present = _get(msg, row.triton)
        if present:
            value = row.convert(raw)
            r.take(path)
        elif _pattern(path) in DEFAULTS:
            value = DEFAULTS[_pattern(path)]
        elif row.always:
            value = row.convert(raw)
        else:
            continue
        if not row.always and not spec_field.is_required() and value == spec_field.default:
            continue
        out[row.spec] = value
        r.origin[f"{spec}.{row.spec}" if spec else row.spec] = path
    return out


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The spec class of a field such as `InitialState | None`."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def spec_order(entry: dict[str, Any], owner: type[BaseModel]) -> dict[str, Any]:
    """`entry`'s keys in the order the spec declares its fields (readable, stable)."""
    order = {(f.alias or n): i for i, (n, f) in enumerate(owner.model_fields.items())}
    return dict(sorted(entry.items(), key=lambda kv: order.get(kv[0], len(order))))


def same_as_defaults(cfg: Message, r: Reading) -> None:
    """Take the messages that spell out exactly Triton's default (NORMALISATIONS' same_as)."""
    for path, text in SAME_AS.items():
        value, present = _get(cfg, path)
        if present and isinstance(value, Message):
            default = type(value)()
            text_format.Parse(text, default)
            if value == default:
                r.take(path)
