"""MkDocs hooks (mkdocs.yml `hooks:`): each page's picture markers drawn from the code as the site is
built (tools/pictures.py); Mermaid carried by the site (tools/mermaid.py): its script and licence copied
in, and loaded, before Material's bundle, on each page that has a diagram, so that Material fetches
nothing from a CDN."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mermaid
import pictures

DIAGRAM = 'class="mermaid"'  # a page's diagram, as pymdownx.superfences writes it (mkdocs.yml)
BUNDLE = '<script src="'  # the first script of Material's page: its bundle, then its search
MERMAID_JS = f"{mermaid.SITE_DIR}/mermaid.min.js"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return pictures.expand(markdown)


def on_files(files: Files, config: Any) -> Files:
    script = mermaid.cached()
    if script is None:
        raise PluginError(f"Mermaid {mermaid.VERSION} is not fetched yet: run `make docs` (tools/mermaid.py)")
    for name in mermaid.FILES.values():
        files.append(
            File.generated(config, f"{mermaid.SITE_DIR}/{name}", abs_src_path=str(script.parent / name))
        )
    return files


def on_post_page(output: str, page: Any, config: Any) -> str:
    """A page with a diagram loads the site's mermaid.min.js before Material's scripts (Material then
    finds `mermaid` defined and loads no other)."""
    if DIAGRAM not in output:
        return output
    at = output.find(BUNDLE)
    if at == -1:
        raise PluginError(f"{page.file.src_uri}: no script of Material's to load Mermaid before")
    script = f'<script src="{get_relative_url(MERMAID_JS, page.url)}"></script>\n    '
    return output[:at] + script + output[at:]
