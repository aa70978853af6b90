"""The package's extras: the core runs without them, a command whose extra is missing says which one to
install in one line, and the model-config schema carried in the core is tritonclient's own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import EXAMPLES
from tritonpipeline import extras
from tritonpipeline.compiler.triton_config import SCHEMA_FILE


def test_the_carried_schema_is_the_pinned_tritonclients() -> None:
    spec = importlib.util.find_spec("tritonclient")
    assert spec is not None and spec.submodule_search_locations, "the dev extra installs tritonclient"
    theirs = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    assert SCHEMA_FILE.read_bytes() == theirs.read_bytes()


def test_every_extra_is_declared_in_pyproject() -> None:
    import tomllib

    declared = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
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


def without(modules: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where `modules` cannot be imported (as when not installed)."""
    block = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run(
        [sys.executable, "-c", block + code], capture_output=True, text=True, timeout=120, check=False
    )


CLI = "from tritonpipeline.cli import main; sys.exit(main({args!r}))"


@pytest.mark.cli
@pytest.mark.parametrize(
    ("blocked", "args", "extra"),
    [
        (("pytriton",), ["serve", str(EXAMPLES / "fanout.yaml")], "serve"),
        (("kopf",), ["run"], "operator"),
        (("kubernetes",), ["run"], "operator"),
    ],
)
def test_a_command_without_its_extra_is_one_line(
    blocked: tuple[str, ...], args: list[str], extra: str
) -> None:
    result = without(blocked, CLI.format(args=args))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"error: tritonpipeline {args[0]} needs the {extra!r} extra ({blocked[0]} is not installed): "
        f"pip install 'tritonpipeline[{extra}]'"
    ], result.stderr


@pytest.mark.cli
@pytest.mark.parametrize(
    ("scheme", "blocked", "extra"), [("s3", "boto3", "s3"), ("gs", "google.cloud.storage", "gcs")]
)
def test_assemble_from_a_bucket_without_its_extra_is_one_line(
    tmp_path: Path, scheme: str, blocked: str, extra: str
) -> None:
    from tritonpipeline.render.packing import pack

    generated = tmp_path / "generated"
    generated.mkdir()
    (part,) = pack({}, ["m"], 1 << 20)  # an empty generated repository, as the ConfigMaps carry it
    for key, text in part.data.items():
        (generated / key).write_text(text)
    args = ["assemble", "--generated", str(generated), "--source", f"{scheme}://bucket/models"]
    result = without((blocked,), CLI.format(args=[*args, "--out", str(tmp_path / "out")]))
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"needs the {extra!r} extra" in line and f"pip install 'tritonpipeline[{extra}]'" in line, line


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
