"""docs/architecture.md cannot rot: every name of the code it gives (`reconcile.pipeline.reconcile`, in
backticks or in its diagrams) resolves in the package, every path it gives exists, every `make TARGET` is
a target of the Makefile; and the design lives in the repository: no file cites a design document
outside it (the code cites docs/architecture.md). Pure: reads files and imports modules."""

from __future__ import annotations

import importlib
import re
import subprocess
from collections.abc import Iterator

import pytest
from layers import LAYERS

from helpers import DOCS, ROOT

PAGE = DOCS / "architecture.md"
PACKAGE = ROOT / "operator" / "tritonpipeline"
PARTS = {part for layer in LAYERS for part in layer.parts}
SUFFIXES = (".py", ".md", ".yaml", ".json", ".c")
# a name of the code: a part of the package, then attributes (written without the package's own name)
CODE_NAME = re.compile(r"\b(?:" + "|".join(sorted(PARTS)) + r")(?:\.[A-Za-z_]\w*)+")
BACKTICKED = re.compile(r"`([^`\n]+)`")
MERMAID = re.compile(r"```mermaid\n(.*?)```", re.S)


def resolves(name: str) -> bool:
    """Whether `name` (`kube.api_client.Kube.apply`) is a module of the package or an attribute of one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(["tritonpipeline", *parts[:cut]]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def named(text: str) -> Iterator[tuple[str, str]]:
    """(kind, token) of every name, path and make target the page gives: backticked in its prose, and
    the code's names in its diagrams."""
    prose = MERMAID.sub("", text)
    for token in BACKTICKED.findall(prose):
        if token.startswith("make "):
            yield "target", token.split()[1]
        elif any(c in token for c in "<* ("):
            continue  # a placeholder, a command or a call shown with its arguments
        elif "/" in token or token.endswith(SUFFIXES):
            yield "path", token
        elif CODE_NAME.fullmatch(token):
            yield "name", token
    for diagram in MERMAID.findall(text):
        yield from (("name", m) for m in CODE_NAME.findall(diagram))


def exists(path: str) -> bool:
    return any((base / path).exists() for base in (ROOT, PACKAGE))


def targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def test_every_name_path_and_target_on_the_page_exists() -> None:
    found = list(named(PAGE.read_text()))
    kinds = {kind for kind, _ in found}
    assert kinds == {"name", "path", "target"} and len(found) > 100, (kinds, len(found))
    missing = sorted(
        f"{kind} {token}"
        for kind, token in set(found)
        if not {"name": resolves, "path": exists, "target": targets().__contains__}[kind](token)
    )
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("`reconcile.pipeline.reconcile_all`", "name reconcile.pipeline.reconcile_all"),
        ("`kube.api_client.Kube.apply_all`", "name kube.api_client.Kube.apply_all"),
        ("`compiler/rule.py`", "path compiler/rule.py"),
        ("`make goldens`", "target goldens"),
        (
            '```mermaid\nflowchart LR\n  A["spec.document.parse_pipelines"]\n```',
            "name spec.document.parse_pipelines",
        ),
    ],
)
def test_a_wrong_name_is_caught(text: str, wrong: str) -> None:
    (kind, token), *_ = named(text)
    assert f"{kind} {token}" == wrong
    assert not {"name": resolves, "path": exists, "target": targets().__contains__}[kind](token)


def test_the_layer_table_names_every_part_of_the_package() -> None:
    """The generated table (tools/layers.py) shows each top-level module and subpackage of the package."""
    text = PAGE.read_text()
    tops = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    tops |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    unshown = sorted(t for t in tops if f"`{t}.py`" not in text and f"`{t}/`" not in text)
    assert not unshown, unshown


OUTSIDE = "DESIGN" + ".md"  # the design document earlier code cited, which no checkout holds


def test_no_file_names_a_design_document_outside_the_repository() -> None:
    """The design is docs/architecture.md: no tracked or new file of the repository cites OUTSIDE."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: git ls-files lists the repository's files")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = [f for f in listed.split("\0") if f and not f.startswith(("site/", ".venv/"))]
    assert len(files) > 200
    citing = []
    for name in files:
        path = ROOT / name
        if path.is_file() and not path.is_symlink() and OUTSIDE.encode() in path.read_bytes():
            citing.append(name)
    assert not citing, (
        f"files that cite {OUTSIDE}, which no checkout holds (cite docs/architecture.md): {citing}"
    )
