"""Error types shared by the spec parser, the compiler and the CLI."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    """One validation problem: where (a field path such as ``spec.models[0].name``) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(Exception):
    """A TritonPipeline that cannot be compiled. Carries every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem], source: str | None = None) -> None:
        self.problems: list[Problem] = list(dict.fromkeys(problems))
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        prefix = f"{self.source}: " if self.source else ""
        return "\n".join(prefix + str(p) for p in self.problems)

    def as_dicts(self) -> list[dict[str, str]]:
        return [{"source": self.source or "", "path": p.path, "message": p.message} for p in self.problems]
