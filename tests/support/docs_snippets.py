"""What tests/unit/test_docs_snippets.py and tests/component/test_docs_snippets.py share."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import DOCS

# -- docs/getting-started/local.md's "Send a request", run as written against a real `serve`

FENCED = re.compile(r"```(\w+)\n(.*?)```", re.S)


REQUEST_PAGE = DOCS / "getting-started" / "local.md"


REQUEST_SECTION = "## Send a request"


def fenced_blocks(page: Path, section: str) -> list[tuple[str, str]]:
    """(language, text) of each fenced block of `page` under the heading `section`, in order."""
    text = page.read_text()
    start = text.index(f"\n{section}\n")
    end = text.find("\n## ", start + 1)
    return FENCED.findall(text[start : end if end != -1 else len(text)])
