"""The package's extras: the core runs without them, a command whose extra is missing says which one to
install in one line, and the model-config schema carried in the core is tritonclient's own.
Here the pure tests; those on real components are in tests/component/test_extras.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from helpers import EXAMPLES, ROOT
from support.extras import without
from tritonpipeline import extras
from tritonpipeline.compiler.triton_config import SCHEMA_FILE


def test_the_carried_schema_is_the_pinned_tritonclients() -> None:
    spec = importlib.util.find_spec("tritonclient")
    assert spec is not None and spec.submodule_search_locations, "the dev extra installs tritonclient"
    theirs = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    assert SCHEMA_FILE.read_bytes() == theirs.read_bytes()


def test_every_extra_is_declared_in_pyproject() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras.EXTRAS) <= set(declared)
    # the dev extra (make venv) installs every runtime extra, and the docs site's tools besides
    (own,) = [d for d in declared["dev"] if d.startswith("tritonpipeline[")]
    assert set(own.removeprefix("tritonpipeline[").rstrip("]").split(",")) == {*extras.EXTRAS, "docs"}


def test_missing_module_message_names_the_extra() -> None:
    with pytest.raises(extras.MissingExtra) as err:
        extras.load("tritonpipeline_absent_module", "serve", "tritonpipeline serve")
    assert str(err.value) == (
        "tritonpipeline serve needs the 'serve' extra (tritonpipeline_absent_module is not installed): "
        "pip install 'tritonpipeline[serve]'"
    )


def test_the_client_without_its_extra_names_it() -> None:
    result = without(("numpy",), "import tritonpipeline.client")
    assert result.returncode == 1
    assert (
        "MissingExtra: tritonpipeline.client needs the 'client' extra (numpy is not installed)"
        in result.stderr
    )


def test_the_core_commands_need_no_extra(tmp_path: Path) -> None:
    """validate, render, graph, manifests and crd with every extra's modules blocked."""
    blocked = (*(m for _, modules in extras.EXTRAS.values() for m in modules), "tritonclient")
    doc = EXAMPLES / "fanout.yaml"
    in_cluster = tmp_path / "cluster.yaml"
    in_cluster.write_text(doc.read_text().replace("uri: ../model_repository", "uri: pvc://models/triton"))
    code = (
        "from tritonpipeline.cli import main\n"
        f"assert main(['validate', {str(doc)!r}]) == 0\n"
        f"assert main(['render', {str(doc)!r}, '-o', {str(tmp_path / 'repo')!r}]) == 0\n"
        f"assert main(['graph', {str(doc)!r}]) == 0\n"
        f"assert main(['manifests', {str(in_cluster)!r}]) == 0\n"
        "assert main(['crd']) == 0\n"
        "loaded = [m for m, v in sys.modules.items() if v is not None]\n"
        "extra = ('numpy', 'kopf', 'boto3', 'pytriton')\n"
        "assert not [m for m in loaded if m.split('.')[0] in extra], loaded\n"
    )
    result = without(blocked, code)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "repo" / "vision" / "config.pbtxt").exists()
