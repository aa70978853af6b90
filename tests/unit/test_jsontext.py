"""jsontext: the API server's JSON read never deeper than MAX_DEPTH (pure)."""

from __future__ import annotations

import json

import pytest

from helpers import nesting_depth
from tritonpipeline import jsontext
from tritonpipeline.jsontext import CUT, MAX_DEPTH


def nested(levels: int, leaf: str = "1") -> str:
    return '{"a":' * levels + leaf + "}" * levels


def test_what_is_shallow_enough_is_read_as_json_reads_it() -> None:
    text = json.dumps({"s": 'x"[{\\', "l": [1, [2, {"k": None}]], "u": "é[", "n": 1.5}) + nested(
        MAX_DEPTH - 1
    )
    text = "[" + text.replace("}{", "},{") + "]"
    assert jsontext.loads(text) == json.loads(text)
    assert jsontext.loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 1_000, 20_000])
def test_a_value_below_the_limit_is_read_as_cut(levels: int) -> None:
    """Python's decoder raised RecursionError from about 1,000 levels; the API server takes 10,000."""
    value = jsontext.loads('{"spec": ' + nested(levels) + ', "after": [1]}')
    assert value["after"] == [1]
    (at,) = jsontext.cut_paths(value)
    assert at == ("spec", *["a"] * (MAX_DEPTH - 1))


def test_brackets_inside_strings_are_not_levels() -> None:
    text = '{"s": "' + "[{" * 5_000 + '\\"", "t": ' + nested(3) + "}"
    assert jsontext.loads(text) == json.loads(text)


def test_every_cut_is_found_lists_included() -> None:
    text = "[" + nested(MAX_DEPTH + 5) + ", 1, " + '{"x": [' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "]}]"
    value = jsontext.loads(text)
    assert [at[:3] for at in jsontext.cut_paths(value)] == [(0, "a", "a"), (2, "x", 0)]
    assert value[1] == 1


def test_a_string_equal_to_cut_that_was_sent_is_found_too() -> None:
    """A client may send the text itself: it is refused like a cut value (no pipeline needs it)."""
    assert list(jsontext.cut_paths({"a": [CUT]})) == [("a", 0)]


@pytest.mark.parametrize("opener", ["[", '{"k":'])
def test_the_quick_depth_check_holds_at_the_limit(opener: str) -> None:
    """A value opening exactly at MAX_DEPTH is read as it is, one level more is cut: whatever the kind
    of bracket, with brackets and escaped quotes in strings and siblings beside the deep one."""
    closer = "]" if opener == "[" else "}"
    noise = '{"s": "]]}}\\"[[", "l": [[], {}]}'
    for levels, cut in ((MAX_DEPTH - 1, False), (MAX_DEPTH, True)):
        text = "[" + noise + "," + opener * levels + "0" + closer * levels + "," + noise + "]"
        value = jsontext.loads(text)
        assert bool(list(jsontext.cut_paths(value))) is cut
        if not cut:
            assert value == json.loads(text)


# strings whose escapes end next to a quote or a bracket: an escaped backslash before the closing quote,
# an escaped quote after escaped backslashes, brackets, non-ASCII text
TRICKY = ["\\", '"', '\\"', '\\\\"', "]}", "[{", 'é"]', "\\]", "\t\\", "\u2028{"]


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
@pytest.mark.parametrize("tricky", TRICKY)
def test_escapes_beside_quotes_and_brackets_do_not_move_the_depth(levels: int, tricky: str) -> None:
    value: object = {"s": tricky, tricky: tricky}
    for i in range(levels - 1):
        value = {tricky: value, "k": [tricky]} if i % 2 else [tricky, value]
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert nesting_depth(json.loads(text)) == levels
        assert jsontext._shallow(text.encode()) is (levels <= MAX_DEPTH)
        read = jsontext.loads(text)
        assert bool(list(jsontext.cut_paths(read))) is (levels > MAX_DEPTH)


def test_a_text_with_a_lone_surrogate_is_read_as_json_reads_it() -> None:
    text = '{"s": "\ud800", "l": [1]}'
    assert jsontext.loads(text) == json.loads(text)
