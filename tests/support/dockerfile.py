"""What tests/unit/test_dockerfile.py and tests/component/test_dockerfile.py share."""

from __future__ import annotations

from helpers import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        current += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if not stripped.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
            current = ""
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(text):
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def named(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions by its name (`FROM ... AS name`)."""
    out = {}
    for stage in stages(text):
        _, _, name = stage[0][1].partition(" AS ")
        assert name, f"every stage is named: {stage[0]}"
        out[name] = stage
    return out
