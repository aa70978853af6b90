"""The package's layout says which way its imports run (docs/architecture.md, "Layers"): every module
belongs to one layer, and imports only from its own part of its layer or the layers below. The layers
are tools/layers.py's LAYERS (the page's table is generated from them). Parsed from the source, so a new
import that runs upward fails here with the module and the line."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

from layers import ALLOWED, LAYERS

from helpers import ROOT

PACKAGE = ROOT / "operator" / "tritonpipeline"
LAYER = {part: i for i, layer in enumerate(LAYERS) for part in layer.parts}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    where = PACKAGE.parent.joinpath(*dotted.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def imports(path: Path, text: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import of the package's own modules in `path` (or in `text`, read as
    if it were that file's): `from X import a` names X.a where that is a module."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" if is_module(f"{target}.{a.name}") else target for a in node.names]
            yield from ((node.lineno, t) for t in dict.fromkeys(names) if t.startswith("tritonpipeline."))
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("tritonpipeline."))


def layer_of(module: str) -> str:
    return module.split(".")[1]


def test_every_module_has_a_layer() -> None:
    tops = {
        layer_of(module_name(p))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" or p.parent != PACKAGE
    }
    assert tops - {"__main__"} <= set(LAYER), sorted(tops - set(LAYER))
    # the root keeps only the foundation, the client and the handlers: the rest (the CLI too) is grouped
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert loose == ["client", "errors", "extras", "handlers", "jsontext", "settings", "yamltext"], loose


def test_imports_run_downward_only() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = layer_of(module_name(path)) if path.parent != PACKAGE or path.name != "__init__.py" else None
        if here is None:
            continue
        for line, target in imports(path):
            there = layer_of(target)
            # above, or beside (a part of the same layer that is not this one: local and runtime)
            against = LAYER[there] > LAYER[here] or (LAYER[there] == LAYER[here] and there != here)
            if against and (here, target) not in ALLOWED:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {here} imports {target}")
    assert not upward, "imports against the layers (tools/layers.py LAYERS):\n" + "\n".join(upward)


def test_an_upward_import_is_caught() -> None:
    # the rule applied to a source the test writes: the compiler importing the operator's reconcile
    text = "from ..reconcile.pipeline import reconcile\nfrom . import rules\n"
    found = [t for _, t in imports(PACKAGE / "compiler" / "example.py", text)]
    assert found == ["tritonpipeline.reconcile.pipeline", "tritonpipeline.compiler.rules"]
    assert LAYER[layer_of(found[0])] > LAYER["compiler"]


def test_the_importer_runs_the_compiler_backwards() -> None:
    """compiler/ turns a spec into Triton's configs, importer/ Triton's configs back into a spec: the
    importer may use the compiler (to check what it wrote), the compiler imports nothing of the importer."""
    assert LAYER["importer"] > LAYER["compiler"]
    back = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for path in sorted((PACKAGE / "compiler").rglob("*.py"))
        for line, target in imports(path)
        if layer_of(target) == "importer"
    ]
    assert not back, back
    # the rule applied to a source the test writes: the compiler importing the importer
    text = "from ..importer import import_repository\n"
    (found,) = [t for _, t in imports(PACKAGE / "compiler" / "example.py", text)]
    assert found == "tritonpipeline.importer" and LAYER[layer_of(found)] > LAYER["compiler"]


def duplicate_basenames(paths: list[Path]) -> dict[str, list[str]]:
    """The module file names (`__init__`/`__main__` aside) that more than one of `paths` has."""
    seen: dict[str, list[str]] = {}
    for path in paths:
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    return {name: where for name, where in sorted(seen.items()) if len(where) > 1}


def test_module_file_names_are_unique() -> None:
    """A file name says what it holds wherever it is seen (an editor's tab, a traceback, a walk through the
    code): no two modules of the package share one, so no import needs an `as` to tell them apart."""
    assert not (twice := duplicate_basenames(sorted(PACKAGE.rglob("*.py")))), twice
    # the rule applied to files the test writes: a second status.py is caught
    written = [
        PACKAGE / "render" / "conditions.py",
        PACKAGE / "reconcile" / "status.py",
        PACKAGE / "x" / "status.py",
    ]
    assert duplicate_basenames(written) == {"status.py": ["reconcile/status.py", "x/status.py"]}


# what talks to the API server: the package's own client, and the libraries under it and kopf
API_CLIENT = ("tritonpipeline.kube", "kubernetes", "kopf", "urllib3")


def api_imports(path: Path, text: str | None = None) -> list[str]:
    """`line: module` of every import in `path` (or in `text`, read as if it were that file's) of what
    talks to the API server."""
    source = path.read_text() if text is None else text
    found = [(line, target) for line, target in imports(path, source)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module))
    return sorted(
        {f"{line}: {t}" for line, t in found if any(t == m or t.startswith(m + ".") for m in API_CLIENT)}
    )


def test_the_renderers_import_nothing_of_the_api_client() -> None:
    """render/ turns a spec and its artifacts into Kubernetes objects and calls no API server: it imports
    neither kube/ (the API client) nor the libraries that talk to one, so the CLI, the webhook and the
    tests run every renderer without a cluster."""
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sorted((PACKAGE / "render").rglob("*.py"))
        if (hits := api_imports(path))
    }
    assert not found, found
    # the rule applied to a source the test writes: a renderer importing the API client, and kopf
    text = "import kopf\nfrom ..kube.api_client import Kube\nfrom .meta import metadata\n"
    written = api_imports(PACKAGE / "render" / "example.py", text)
    assert written == ["1: kopf", "2: tritonpipeline.kube.api_client"]


def beside_calls(path: Path, text: str | None = None) -> list[int]:
    """The lines of `path` (or of `text`, read as that file) that call something with `beside=`."""
    tree = ast.parse(path.read_text() if text is None else text)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and any(k.arg == "beside" for k in node.keywords)
    ]


def test_one_validation_entry_passes_the_compilers_rules_to_the_parse() -> None:
    """Issue 56: the CLI, the webhook and the operator each entered validation their own way, and each had
    to remember to pass the compiler's graph rules to the parse (`beside=`); a rule added in the wrong
    place was skipped by one of them. Now `validate` is the one caller (spec/parse.py's own parse
    passes it on to itself)."""
    from tritonpipeline.render.checks import validate

    home = Path(inspect.getsourcefile(validate) or "")
    spec = PACKAGE / "spec" / "parse.py"
    callers = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in (home, spec)
        for line in beside_calls(path)
    }
    assert not callers, callers
    assert len(beside_calls(home)) == 1
    # the rule applied to a source the test writes: a handler passing the rules itself
    assert beside_calls(PACKAGE / "x.py", "parse_pipeline(doc, beside=graph_problems_beside)\n") == [1]
