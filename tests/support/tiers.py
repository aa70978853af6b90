"""The test tiers, one folder each (docs/development.md, "Tests by tier"): tests/unit/ is pure (no server, no
subprocess of the CLI, no build), tests/component/ starts real components on this machine, tests/cluster/
runs real pods on a cluster. A test that starts a component carries its marker (pyproject.toml's markers,
one per component) and gets the component from a fixture of conftest.py or node_cluster.py
(FIXTURE_MARKERS); tests/unit/test_tiers.py holds tests/unit/ to neither."""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

from helpers import ROOT

TESTS = ROOT / "tests"
TIERS = ("unit", "component", "cluster")
# the fixture that starts a real component -> the marker a test using it must carry (conftest.py checks it)
FIXTURE_MARKERS = {
    "serve_pipeline": "tritonserver",
    "shared_pipeline": "tritonserver",
    "control_plane": "apiserver",
    "release_plane": "apiserver",
    "helm_binary": "helm",
    "nginx_workdir": "nginx",
    "prometheus_dir": "prometheus",
    "cluster": "node",
    "chart_operator": "node",
}
# where the shared fixtures are defined
FIXTURE_MODULES = (TESTS / "conftest.py", TESTS / "node_cluster.py")


def component_markers() -> set[str]:
    """The markers pyproject.toml declares: each names a real component (or a cluster) a test starts."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
        "markers"
    ]
    return {line.split(":", 1)[0].strip() for line in declared}


def _fixture_params(path: Path) -> dict[str, set[str]]:
    """fixture name -> the fixtures it asks for, of every @pytest.fixture function in `path`."""
    found: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and any(
            "fixture" in ast.unparse(d) for d in node.decorator_list
        ):
            found[node.name] = {
                a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            }
    return found


def server_fixtures() -> set[str]:
    """The shared fixtures that start a real component: FIXTURE_MARKERS' and every fixture asking for one of
    them, however indirectly (`kube` for `control_plane`, `namespace` for `kube`, ...)."""
    params: dict[str, set[str]] = {}
    for path in FIXTURE_MODULES:
        params.update(_fixture_params(path))
    starting = set(FIXTURE_MARKERS)
    while grown := {name for name, asks in params.items() if asks & starting} - starting:
        starting |= grown
    return starting


def _parametrized(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The argument names `function`'s own @pytest.mark.parametrize gives values (not fixtures then)."""
    names: set[str] = set()
    for dec in function.decorator_list:
        if isinstance(dec, ast.Call) and ast.unparse(dec.func).endswith("mark.parametrize") and dec.args:
            given = dec.args[0]
            if isinstance(given, ast.Constant) and isinstance(given.value, str):
                names |= {n.strip() for n in given.value.split(",")}
            elif isinstance(given, (ast.Tuple, ast.List)):
                names |= {
                    e.value for e in given.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
    return names


def _takes_fixtures(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether pytest fills the function's arguments with fixtures: a test, or a fixture itself (a
    helper's parameters are its own)."""
    return node.name.startswith("test") or any("fixture" in ast.unparse(d) for d in node.decorator_list)


def pure_problems(path: Path, text: str | None = None) -> list[str]:
    """`file:line: why` for each thing in the test module `path` (or in `text`, read as that file) that a
    pure test must not have: a component's marker, a fixture that starts a component, an import of a
    module of another tier."""
    tree = ast.parse(path.read_text() if text is None else text)
    markers, fixtures = component_markers(), server_fixtures()
    where = path.relative_to(ROOT)
    problems = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in markers
            and ast.unparse(node.value) in ("pytest.mark", "mark")
        ):
            problems.append(f"{where}:{node.lineno}: marker {node.attr} (a real component)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _takes_fixtures(node):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            problems += [
                f"{where}:{node.lineno}: {node.name} asks for {a.arg} (starts a real component)"
                for a in args
                if a.arg in fixtures and a.arg not in _parametrized(node)
            ]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            problems += [
                f"{where}:{node.lineno}: imports {m} (tests of another tier)"
                for m in modules
                if m.split(".")[0] in TIERS[1:]
            ]
    return sorted(problems, key=lambda p: int(p.split(":")[1]))
