"""Error types shared by the spec parser, the compiler and the CLI."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePath

QUOTE_LIMIT = 120  # the most characters of one user value quoted in a message
TEXT_LIMIT = 2000  # the most characters of one problem's path or message

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxstring = _REPR.maxother = QUOTE_LIMIT


def plain_number(number: float) -> str:
    """A number as a person writes it in a message: 4096, not 4096.0 or 4.096e+03."""
    return str(int(number)) if float(number).is_integer() else str(number)


def clip(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text` cut to about `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def kind_of(value: object) -> str:
    """What a user value is, in words, for a message: "a mapping", "an integer", "null"."""
    if value is None:
        return "null"
    names = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }
    return names.get(type(value), f"a {type(value).__name__}")


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """repr() of a user value (a path, a name, a YAML value) for a message: bounded in length and in the
    time it takes, so a huge or deeply nested value (a YAML alias bomb) still gives a one-line message."""
    text = _REPR.repr(str(value) if isinstance(value, PurePath) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def reason(exc: OSError, about: object = None) -> str:
    """An OSError for a one-line message: the OS reason, and the file it concerns when that is not
    `about` (the path the message already names)."""
    what = exc.strerror or str(exc)
    if exc.filename is None or str(exc.filename) == str(about):
        return what
    return f"{what} ({quote(exc.filename)})"


@dataclass(frozen=True, order=True)
class Problem:
    """One validation problem: where (a field path such as ``spec.models[0].name``) and what."""

    path: str
    message: str

    def __post_init__(self) -> None:
        # the last line of defence for messages built without quote(): never echo megabytes back
        object.__setattr__(self, "path", clip(self.path))
        object.__setattr__(self, "message", clip(self.message))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(Exception):
    """A TritonPipeline that cannot be compiled. Carries every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem], source: str | None = None) -> None:
        self.problems: list[Problem] = list(dict.fromkeys(problems))
        self.source = source
        super().__init__(self.render())

    @classmethod
    def one(cls, message: str, path: str = "", source: str | None = None) -> SpecError:
        """A SpecError of a single problem."""
        return cls([Problem(path, message)], source)

    def render(self) -> str:
        prefix = f"{self.source}: " if self.source else ""
        return "\n".join(prefix + str(p) for p in self.problems)

    def as_dicts(self) -> list[dict[str, str]]:
        return [{"source": self.source or "", "path": p.path, "message": p.message} for p in self.problems]
