"""MkDocs hooks (mkdocs.yml `hooks:`): each page's picture markers drawn from the code as the site is
built (tools/pictures.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pictures


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return pictures.expand(markdown)
