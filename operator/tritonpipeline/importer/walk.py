"""The not-carried walk: every field a parsed config sets that the mapper did not take, found by walking
the protobuf message (`ListFields()`, recursively), reported as a NOT_CARRIED finding: a field Triton
adds later is reported, never dropped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from .findings import NOT_CARRIED, NOT_IN_SPEC
from .reading import Reading, map_key

VALUE_LIMIT = 100  # the most characters of a config value quoted in a finding


def one_line(msg: Message) -> str:
    """A message in the text format on one line; an empty one with a single (repeated) field, such as
    `reshape { shape: [] }`, as that field left empty, since that is how configs write it."""
    text = text_format.MessageToString(msg, as_one_line=True).strip()
    fields = msg.DESCRIPTOR.fields
    if not text and len(fields) == 1 and fields[0].is_repeated:
        text = f"{fields[0].name}: []"
    return "{ " + text + " }" if text else "{}"


def _show(fd: FieldDescriptor, value: Any) -> str:
    """A config value as the text format writes it, on one line, bounded."""
    if fd.type == FieldDescriptor.TYPE_MESSAGE and fd.is_repeated and not isinstance(value, Message):
        text = "[" + ", ".join(one_line(v) for v in value) + "]"
    elif isinstance(value, Message):
        text = one_line(value)
    elif fd.is_repeated:
        text = "[" + ", ".join(_scalar(fd, v) for v in value) + "]"
    else:
        text = _scalar(fd, value)
    return text if len(text) <= VALUE_LIMIT else text[: VALUE_LIMIT - 3] + "..."


def _scalar(fd: FieldDescriptor, value: Any) -> str:
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return (
            str(fd.enum_type.values_by_number[value].name)
            if value in fd.enum_type.values_by_number
            else str(value)
        )
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def untaken(msg: Message, prefix: str, r: Reading) -> Iterator[tuple[str, str]]:
    """Every field set in `msg` that the mapper did not take: (field path, value shown), at the highest
    level nothing below which was taken (one line per untouched setting)."""
    for fd, value in msg.ListFields():
        path = prefix + fd.name
        if path in r.taken:
            continue
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            yield path, _show(fd, value)
        elif fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            for key in sorted(value):
                item_path = path + map_key(key)
                if item_path in r.taken:
                    continue
                item = value[key]
                if isinstance(item, Message) and r.touched(item_path):
                    yield from untaken(item, item_path + ".", r)
                else:
                    yield item_path, _show(value_fd, item)
        elif fd.is_repeated:
            for i, item in enumerate(value):
                item_path = f"{path}[{i}]"
                if item_path in r.taken:
                    continue
                if r.touched(item_path):
                    yield from untaken(item, item_path + ".", r)
                else:
                    yield item_path, one_line(item)
        elif r.touched(path):
            yield from untaken(value, path + ".", r)
        else:
            yield path, _show(fd, value)


def report_rest(cfg: Message, r: Reading) -> None:
    for path, shown in untaken(cfg, "", r):
        r.add(NOT_CARRIED, path, NOT_IN_SPEC.format(value=shown))
