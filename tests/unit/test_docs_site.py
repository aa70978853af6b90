"""The built docs site reads offline (issue 55): its diagrams were drawn by a Mermaid that Material fetched
from a CDN when a page was viewed, so an air-gapped reader saw Mermaid's text. The site is built here as
`make docs` builds it (mkdocs build --strict, Mermaid fetched from npm by tools/mermaid.py, cached) and its
pages are read: about 5 s (2 s once the docs are built and Mermaid cached)."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from urllib.parse import urljoin

import pytest

from helpers import ROOT

# a script, stylesheet, font or preconnect a page loads: what a browser fetches as it opens the page
LOADED = re.compile(r"<(?:script|link|img|iframe)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)  # https://..., //cdn..., not a path of the site
DIAGRAM = 'class="mermaid"'
# Material's bundle loads Mermaid from a CDN only when the page has not defined `mermaid`
MATERIAL_GUARD = re.compile(r'typeof mermaid\s*==+\s*"undefined"[^;]{0,200}mermaid@\d+/dist/mermaid\.min\.js')


def _mermaid() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mermaid", ROOT / "tools" / "mermaid.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mermaid = _mermaid()
    if mermaid.cached() is None and shutil.which("npm") is None:
        pytest.skip(f"npm is not installed and Mermaid {mermaid.VERSION} is not cached (make system-deps)")
    mermaid.fetch()
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return out


def _pages(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): p.read_text() for p in sorted(site.rglob("*.html"))}


def test_no_page_loads_anything_from_outside_the_site(site: Path) -> None:
    """No script (Mermaid's was the CDN's), stylesheet or font (Material's Roboto from Google Fonts)."""
    outside = {
        f"{name}: {url}"
        for name, html in _pages(site).items()
        for url in LOADED.findall(html)
        if EXTERNAL.match(url)
    }
    assert not outside, sorted(outside)


def test_every_page_with_a_diagram_loads_the_sites_mermaid_before_materials_bundle(site: Path) -> None:
    mermaid = _mermaid()
    with_diagrams = {name: html for name, html in _pages(site).items() if DIAGRAM in html}
    assert len(with_diagrams) >= 3, sorted(with_diagrams)  # the overview, pipelines and routers pages
    for name, html in with_diagrams.items():
        scripts = re.findall(r'<script src="([^"]+)"', html)
        local = [s for s in scripts if s.endswith(f"{mermaid.SITE_DIR}/mermaid.min.js")]
        assert len(local) == 1, (name, scripts)
        assert (site / urljoin(name, local[0])).resolve() == (
            site / mermaid.SITE_DIR / "mermaid.min.js"
        ).resolve()
        bundle = next(i for i, s in enumerate(scripts) if "/bundle." in s)
        assert scripts.index(local[0]) < bundle, (name, scripts)
    script = (site / mermaid.SITE_DIR / "mermaid.min.js").read_text()
    assert mermaid.VERSION in script and 'globalThis["mermaid"] =' in script  # the pinned one, a global
    assert (site / mermaid.SITE_DIR / "LICENSE").read_text().startswith("The MIT License")
    # and Material, finding `mermaid` defined, fetches no other: the guard its bundle has
    (bundle_js,) = (site / "assets" / "javascripts").glob("bundle.*.min.js")
    assert MATERIAL_GUARD.search(bundle_js.read_text()), "Material's bundle no longer guards its Mermaid load"


def test_a_page_without_a_diagram_does_not_load_mermaid(site: Path) -> None:
    plain = [html for html in _pages(site).values() if DIAGRAM not in html]
    assert plain and not any("mermaid.min.js" in html for html in plain)


def test_the_diagrams_render_with_no_network(site: Path) -> None:
    """A real browser (Debian's chromium, where installed), every address but the site's own through a
    proxy that does not exist: Material replaces each diagram's Mermaid text (`<pre class="mermaid">`)
    with the drawing (`<div class="mermaid">`, its SVG in a closed shadow root). About 5 s."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium here (Debian: apt-get install chromium)")
    page = "concepts/pipelines.html"
    diagrams = (site / page).read_text().count('<pre class="mermaid">')
    assert diagrams >= 2
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/{page}"
        dumped = subprocess.run(
            [
                browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--proxy-server=http://127.0.0.1:9",
                "--proxy-bypass-list=127.0.0.1", "--virtual-time-budget=15000", "--dump-dom", url,
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        server.shutdown()
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    assert dumped.stdout.count('<div class="mermaid">') == diagrams, dumped.stdout[-3000:]
    assert '<pre class="mermaid">' not in dumped.stdout


def test_the_chart_links_into_the_site_where_it_is_published() -> None:
    """One address for the published docs site, the chart's `home` (mkdocs.yml names none: the site links
    nothing outside itself): the alerts' default runbookUrl is the page with the runbooks under it, a page
    the site builds."""
    import yaml

    chart = ROOT / "charts" / "triton-pipeline"
    site = yaml.safe_load((chart / "Chart.yaml").read_text())["home"]
    runbook = yaml.safe_load((chart / "values.yaml").read_text())["prometheusRule"]["runbookUrl"]
    assert site.endswith("/") and runbook.startswith(site), runbook
    page = Path(runbook.removeprefix(site)).with_suffix(".md")
    assert (ROOT / "docs" / page).is_file(), page
