"""The one reader of JSON from the API server (the operator's client, kopf's watches and lists, the
webhook's reviews): what it returns is never nested deeper than MAX_DEPTH, so nothing that walks it
recursively afterwards (kopf's diffs, the spec's validation, a copy) can fail on it.

A value the API server stores may be nested far deeper (the Go JSON decoder takes 10,000 levels, and a
CRD field that keeps unknown content passes them on): Python's decoder gave up at about 1,000 levels, and
the exception ended kopf's watch of every pipeline (issue 54). Here a value deeper than MAX_DEPTH is read
as the string CUT instead; the spec's validation refuses CUT with the field's path (spec/parse.py), so
the pipeline that holds it is reported and skipped, and every other object is read as it is."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

# far deeper than any object the operator reads (a pipeline's pod affinity is 11 levels down, its
# managedFields a few more, a list or a watch event one more)
MAX_DEPTH = 64
CUT = f"<nested more than {MAX_DEPTH} levels deep: not read>"
_CUT_JSON = json.dumps(CUT)
# a JSON string (its escapes included); a token is one or a bracket (those outside strings: the depth)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_TOKEN = re.compile(_STRING.pattern + r"|[\[\]{}]")
# `_shallow`: every byte but quotes and brackets (deleted), a string once its escapes are gone
_NOT_QUOTES_OR_BRACKETS = bytes(set(range(256)) - set(b'"[]{}'))
_PLAIN_STRING = re.compile(rb'"[^"]*"')
_PAIRS = bytes.maketrans(b"[{]}", b"(())")


def _shallow(data: bytes) -> bool:
    """Whether no value of the JSON text `data` opens below MAX_DEPTH (what `_cut` would leave as it
    is), in C-speed passes over bytes: its escaped backslashes and then its escaped quotes taken out (in
    valid JSON a run of backslashes starts an escape, so the pairs line up with the escapes, and every
    quote left delimits a string; UTF-8 puts no ASCII byte inside another character), everything but
    quotes and brackets deleted, the strings taken out, then each pass taking out the innermost pairs
    (one level). Half the time of the same passes over text: the webhook reads every review on the event
    loop."""
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _PLAIN_STRING.sub(b"", unescaped.translate(None, _NOT_QUOTES_OR_BRACKETS)).translate(_PAIRS)
    for _ in range(MAX_DEPTH):
        if not brackets:
            return True
        brackets = brackets.replace(b"()", b"")
    return not brackets


def _cut(text: str) -> str:
    """`text` with each value that opens below MAX_DEPTH replaced by CUT (unchanged when none does)."""
    parts: list[str] = []
    depth, start, last = 0, -1, 0
    for token in _TOKEN.finditer(text):
        c = text[token.start()]
        if c == "{" or c == "[":
            depth += 1
            if depth == MAX_DEPTH + 1:
                start = token.start()
        elif c == "}" or c == "]":
            if depth == MAX_DEPTH + 1:
                parts += [text[last:start], _CUT_JSON]
                last = token.end()
            depth -= 1
    return text if not parts else "".join(parts) + text[last:]


def loads(data: str | bytes | bytearray) -> Any:
    """json.loads, each value below MAX_DEPTH read as CUT."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if _shallow(raw):
        return json.loads(data)
    return json.loads(_cut(data if isinstance(data, str) else raw.decode("utf-8")))


def cut_paths(value: Any) -> Iterator[tuple[str | int, ...]]:
    """Where in `value` loads() cut something, as (key or index, ...) from the top, without recursion."""
    todo: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while todo:
        item, at = todo.pop()
        if item == CUT and isinstance(item, str):
            yield at
        elif isinstance(item, dict):
            todo += [(v, (*at, k)) for k, v in reversed(item.items())]
        elif isinstance(item, list):
            todo += [(v, (*at, i)) for i, v in reversed(list(enumerate(item)))]
