"""The tests lie in the folder of their tier (support/tiers.py, docs/development.md): none is left at
tests/, and nothing in tests/unit/ starts a real component, so `make test-unit` (`pytest tests/unit`) is
the pure tests alone."""

from __future__ import annotations

from support.tiers import TESTS, TIERS, component_markers, pure_problems, server_fixtures


def test_every_test_module_is_in_the_folder_of_its_tier() -> None:
    loose = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if p.parent.name not in TIERS)
    assert not loose, f"test modules outside tests/unit, tests/component and tests/cluster: {loose}"
    assert all((TESTS / tier / "__init__.py").is_file() for tier in TIERS)  # test_X.py in two tiers


def test_nothing_in_unit_starts_a_real_component() -> None:
    problems = [p for path in sorted((TESTS / "unit").glob("*.py")) for p in pure_problems(path)]
    assert not problems, "\n".join(problems)


def test_a_component_test_put_in_unit_is_caught() -> None:
    # the rule applied to a source the test writes: a marker, a server fixture (and one that asks for one),
    # an import of a component test module; a helper's parameter of a fixture's name is its own
    text = (
        "import pytest\n"
        "from component.test_operator import cluster_doc\n"
        "@pytest.mark.apiserver\n"
        "def test_a(kube): ...\n"
        "@pytest.fixture\n"
        "def served(shared_pipeline): ...\n"
        "@pytest.mark.parametrize('x', [pytest.param(1, marks=pytest.mark.cli)])\n"
        "def test_b(x, tmp_path): ...\n"
        "@pytest.mark.parametrize('namespace', ['a'])\n"
        "def test_c(namespace): ...\n"
        "def helper(kube): ...\n"
    )
    assert pure_problems(TESTS / "unit" / "test_example.py", text) == [
        "tests/unit/test_example.py:2: imports component.test_operator (tests of another tier)",
        "tests/unit/test_example.py:3: marker apiserver (a real component)",
        "tests/unit/test_example.py:4: test_a asks for kube (starts a real component)",
        "tests/unit/test_example.py:6: served asks for shared_pipeline (starts a real component)",
        "tests/unit/test_example.py:7: marker cli (a real component)",
    ]


def test_the_component_markers_and_fixtures_are_read_from_their_sources() -> None:
    assert {"tritonserver", "apiserver", "cli", "node", "kind"} <= component_markers()
    # conftest.py's fixtures that start the control plane only through another
    assert {"control_plane", "kube", "namespace", "run_operator", "cluster"} <= server_fixtures()
    assert "tmp_path" not in server_fixtures() and "native_router_env" not in server_fixtures()
