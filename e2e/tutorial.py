"""The cluster tutorial's runnable blocks (docs/getting-started/cluster.md), extracted from the page as
written, so that the kind run executes what a reader copies and the page cannot rot.

The page's rule (an HTML comment at its top says the same): every fenced ```bash block runs, in page
order, in ONE bash session (`set -euo pipefail`, from the repository's root); every ```python block runs,
in its place between them, as a file with the reader's Python. Anything else (```shell, ```console,
```text, ```yaml: an alternative, output shown to the reader, a GPU variant) is never run. The section
`## Clean up` runs apart, last: `blocks` returns what comes before it and what comes from it on.

    before, clean_up = blocks(page.read_text())
    text = script(before, python=sys.executable, workdir=tmp)   # bash -c text, or a file for bash

Pure: nothing here reads the page, writes a file or runs a command (the script writes the Python files
when it runs).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PAGE = Path(__file__).resolve().parent.parent / "docs" / "getting-started" / "cluster.md"
CLEAN_UP = "## Clean up"
Language = Literal["bash", "python"]
RUN: tuple[Language, ...] = ("bash", "python")  # the languages run; every other fence is shown only
# a fence opens with three or more backticks and an info string (its first word the language), closes with
# as many or more and nothing else; either may be indented (a block inside a list item)
OPEN = re.compile(r"^( *)(`{3,})\s*([^`\s]*)[^`]*$")
CLOSE = re.compile(r"^ *(`{3,})\s*$")
# the end of a Python block's heredoc in the script (a block containing this line is refused)
PYTHON_END = "TUTORIAL_PYTHON_BLOCK_END"


class TutorialError(ValueError):
    """The page cannot be run as written: one line naming the line of the page."""


@dataclass(frozen=True)
class Block:
    lang: Language
    code: str  # the block's lines, each ending with a newline
    line: int  # the line number (from 1) of the block's opening fence in the page


def blocks(markdown: str) -> tuple[list[Block], list[Block]]:
    """The runnable blocks before the `## Clean up` heading, and those from it on, each in page order.
    A heading inside a fenced block is not one; an unclosed fence and a page without exactly one
    `## Clean up` heading are refused (TutorialError)."""
    parts: list[list[Block]] = [[]]
    fence: tuple[int, int, str, int] | None = None  # (indent, backticks, language, line) of the open block
    code: list[str] = []
    for number, text in enumerate(markdown.splitlines(), start=1):
        if fence is None:
            opened = OPEN.match(text)
            if opened:
                indent, ticks, lang = opened.groups()
                fence, code = (len(indent), len(ticks), lang, number), []
            elif text.rstrip() == CLEAN_UP:
                if len(parts) > 1:
                    raise TutorialError(f"line {number}: a second {CLEAN_UP!r} heading")
                parts.append([])
            continue
        indent_, ticks_, lang, start = fence
        closed = CLOSE.match(text)
        if closed and len(closed.group(1)) >= ticks_:
            if lang in RUN:
                parts[-1].append(Block(lang, "".join(f"{c}\n" for c in code), start))
            fence = None
        else:  # a content line loses up to the fence's indentation, as CommonMark reads it
            code.append(text[min(indent_, len(text) - len(text.lstrip(" "))) :])
    if fence is not None:
        raise TutorialError(f"line {fence[3]}: the ```{fence[2]} block is never closed")
    if len(parts) == 1:
        raise TutorialError(f"no {CLEAN_UP!r} heading: the clean-up cannot run apart")
    return parts[0], parts[1]


def script(blocks: list[Block], python: str, workdir: Path, page: str = "cluster.md") -> str:
    """One bash script that runs `blocks` in order under `set -euo pipefail`: `# PAGE:LINE` is echoed
    before each block (so a failure names it); a Python block is written to WORKDIR/block-LINE.py and run
    with `python`. The script changes no directory: run it from the repository's root."""
    out = ["set -euo pipefail", ""]
    for block in blocks:
        out.append(f"echo {shlex.quote(f'# {page}:{block.line}')}")
        if block.lang == "bash":
            out.append(block.code.rstrip("\n"))
        else:
            if any(line.strip() == PYTHON_END for line in block.code.splitlines()):
                raise TutorialError(f"{page}:{block.line}: the Python block contains the line {PYTHON_END}")
            path = shlex.quote(str(workdir / f"block-{block.line}.py"))
            out += [
                f"mkdir -p {shlex.quote(str(workdir))}",
                f"cat > {path} <<'{PYTHON_END}'",
                block.code.rstrip("\n"),
                PYTHON_END,
                f"{shlex.quote(python)} {path}",
            ]
        out.append("")
    return "\n".join(out)
