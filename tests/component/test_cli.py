"""`tritonpipeline validate|render|graph` in-process (cli.main) and as the installed console script.
Here the tests on real components; the pure ones are in tests/unit/test_cli.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import CLI, EXAMPLES, MODELS, example
from support.cli import (
    EXAMPLE_FILES,
    _router_name,
    names_in,
    snapshot,
    write_cr,
)
from tritonpipeline import cli
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.triton_config import parse_text
from tritonpipeline.local.repository import MARKER
from tritonpipeline.local.tritonserver import free_ports
from tritonpipeline.spec import parse_pipeline


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "tritonpipeline.cli"]
    return subprocess.run(
        [*cmd, *map(str, args)], capture_output=True, text=True, timeout=120, env=env, check=False
    )


@pytest.mark.cli
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_validate_examples_subprocess(path: Path) -> None:
    result = run_cli("validate", path)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout


@pytest.mark.cli
def test_validate_several_files_at_once() -> None:
    result = run_cli("validate", *EXAMPLE_FILES)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("is valid") == len(EXAMPLE_FILES)


@pytest.mark.cli
def test_validate_invalid_subprocess_has_no_traceback(invalid_cr: Path) -> None:
    result = run_cli("validate", invalid_cr)
    assert result.returncode == 1
    assert "spec.pipelines[0].steps[1].inputs.FEATS_IN_B" in result.stderr
    assert "unknown step 'rigth'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""


@pytest.mark.cli
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("kind: [\n", "invalid YAML"),
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("\xff\xfe", None),  # written as bytes below: not UTF-8
    ],
    ids=["broken-yaml", "duplicate-key", "not-utf8"],
)
def test_validate_unreadable_inputs_exit_1_cleanly(
    tmp_path: Path, content: str, expected: str | None
) -> None:
    path = tmp_path / "cr.yaml"
    if expected is None:
        path.write_bytes(b"\xff\xfe\x00bad")
        expected = "not UTF-8"
    else:
        path.write_text(content)
    result = run_cli("validate", path)
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.cli
def test_validate_missing_file(tmp_path: Path) -> None:
    result = run_cli("validate", tmp_path / "absent.yaml")
    assert result.returncode == 1
    assert "cannot read file" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.cli
def test_validate_json_subprocess_is_pure_json(invalid_cr: Path) -> None:
    result = run_cli("validate", "--output", "json", invalid_cr)
    assert result.returncode == 1
    (entry,) = json.loads(result.stdout)
    assert entry["valid"] is False
    assert all(set(e) == {"source", "path", "message"} for e in entry["errors"])


@pytest.mark.cli
def test_validate_json_all_valid_exit_0() -> None:
    result = run_cli("validate", "--output", "json", *EXAMPLE_FILES)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [r["valid"] for r in report] == [True] * len(EXAMPLE_FILES)


@pytest.mark.cli
def test_validate_usage_error_is_exit_2() -> None:
    result = run_cli("validate")
    assert result.returncode == 2
    assert "usage" in result.stderr.lower()


@pytest.mark.cli
def test_render_subprocess_and_cpu_flag(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    result = run_cli("render", EXAMPLES / "fanout.yaml", "-o", out, "--cpu")
    assert result.returncode == 0, result.stderr
    for model in ("extractor", "head_b", "head_c"):
        cfg = parse_text((out / model / "config.pbtxt").read_bytes())
        assert [g.kind for g in cfg.instance_group] == [cfg.instance_group[0].KIND_CPU]


@pytest.mark.cli
def test_render_into_non_empty_dir_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    out.mkdir()
    (out / "keep-me.txt").write_text("user data")
    result = run_cli("render", EXAMPLES / "diamond.yaml", "-o", out)
    assert result.returncode == 1
    assert "not empty" in result.stderr and "--force" in result.stderr
    assert "Traceback" not in result.stderr
    assert names_in(out) == {"keep-me.txt"}
    assert names_in(tmp_path) == {"repo"}
    result = run_cli("render", EXAMPLES / "diamond.yaml", "-o", out, "--force")
    assert result.returncode == 1  # --force replaces only an earlier render
    assert names_in(out) == {"keep-me.txt"}
    (out / "keep-me.txt").unlink()
    assert run_cli("render", EXAMPLES / "fanout.yaml", "-o", out).returncode == 0
    result = run_cli("render", EXAMPLES / "diamond.yaml", "-o", out, "--force")
    assert result.returncode == 0, result.stderr
    assert {"extractor", "head_b", "head_c", "join", "diamond"} <= names_in(out)
    assert "vision" not in names_in(out)
    assert names_in(tmp_path) == {"repo"}  # the replaced tree and temp dirs are gone


@pytest.mark.cli
def test_render_invalid_leaves_nothing_behind(
    tmp_path: Path, invalid_cr: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "out"
    parent.mkdir()
    assert cli.main(["render", str(invalid_cr), "-o", str(parent / "repo")]) == 1
    assert "unknown step 'rigth'" in capsys.readouterr().err
    assert list(parent.iterdir()) == []
    result = run_cli("render", invalid_cr, "-o", parent / "repo")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert list(parent.iterdir()) == []


@pytest.mark.cli
def test_render_missing_model_dir_leaves_nothing_behind(tmp_path: Path) -> None:
    models = tmp_path / "models"
    for name in ("extractor", "head_b", "head_c"):  # join is missing
        shutil.copytree(MODELS / name, models / name)
    doc = example("diamond")
    doc["spec"]["modelRepository"]["uri"] = "models"  # relative to the CR file
    cr = write_cr(tmp_path / "cr.yaml", doc)
    result = run_cli("render", cr, "-o", tmp_path / "repo")
    assert result.returncode == 1
    assert "spec.models[3].name" in result.stderr and "'join'" in result.stderr
    assert names_in(tmp_path) == {"models", "cr.yaml"}


@pytest.mark.cli
def test_render_several_pipelines_needs_name(tmp_path: Path) -> None:
    first, second = example("fanout"), example("streaming")
    cr = tmp_path / "both.yaml"
    cr.write_text(yaml.safe_dump_all([first, second]))
    result = run_cli("render", cr, "-o", tmp_path / "repo")
    assert result.returncode == 1
    assert "vision" in result.stderr and "streaming" in result.stderr and "--name" in result.stderr
    assert names_in(tmp_path) == {"both.yaml"}
    result = run_cli("render", cr, "-o", tmp_path / "repo", "--name", "streaming")
    assert result.returncode == 0, result.stderr
    assert "streaming" in names_in(tmp_path / "repo")
    result = run_cli("render", cr, "-o", tmp_path / "repo2", "--name", "nope")
    assert result.returncode == 1 and "'nope'" in result.stderr


@pytest.mark.cli
def test_graph_writes_to_file(tmp_path: Path) -> None:
    target = tmp_path / "g.mmd"
    result = run_cli("graph", EXAMPLES / "diamond.yaml", "-o", target)
    assert result.returncode == 0, result.stderr
    assert target.read_text().startswith("flowchart")
    assert _router_name("diamond") in target.read_text()
    target.write_text("my notes")  # an existing file is replaced only with --force
    result = run_cli("graph", EXAMPLES / "diamond.yaml", "-o", target)
    assert result.returncode == 1 and "exists" in result.stderr and target.read_text() == "my notes"
    assert run_cli("graph", EXAMPLES / "diamond.yaml", "-o", target, "--force").returncode == 0
    assert target.read_text().startswith("flowchart")


@pytest.mark.cli
def test_graph_dot_is_accepted_by_graphviz(tmp_path: Path) -> None:
    result = run_cli("graph", EXAMPLES / "fanout.yaml", "--format", "dot")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("digraph")
    assert text.count("{") == text.count("}")
    assert "shape=diamond" in text and _router_name("fanout") in text
    dot = shutil.which("dot")
    if dot is None:
        pytest.skip("Graphviz `dot` is not installed; DOT syntax not checked by graphviz")
    rendered = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True, check=False)
    assert rendered.returncode == 0, rendered.stderr
    assert "<svg" in rendered.stdout


@pytest.mark.cli
def test_graph_png_with_graphviz(tmp_path: Path) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not installed")
    target = tmp_path / "g.png"
    result = run_cli("graph", EXAMPLES / "fanout.yaml", "--format", "png", "-o", target)
    assert result.returncode == 0, result.stderr
    assert target.read_bytes().startswith(b"\x89PNG")


@pytest.mark.cli
def test_graph_svg_without_graphviz_subprocess(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()  # a PATH on which no `dot` can be found
    env = {**os.environ, "PATH": str(empty)}
    result = run_cli("graph", EXAMPLES / "fanout.yaml", "--format", "svg", "-o", tmp_path / "g.svg", env=env)
    assert result.returncode == 2
    assert "Graphviz" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "g.svg").exists()


@pytest.mark.cli
def test_graph_of_invalid_spec(invalid_cr: Path) -> None:
    result = run_cli("graph", invalid_cr)
    assert result.returncode == 1
    assert "unknown step 'rigth'" in result.stderr
    assert result.stdout == ""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: proj/p.yaml whose modelRepository.uri is the local, relative `models`."""
    proj = tmp_path / "proj"
    shutil.copytree(MODELS, proj / "models", ignore=shutil.ignore_patterns("__pycache__"))
    doc = example("diamond")
    doc["spec"]["modelRepository"]["uri"] = "models"
    write_cr(proj / "p.yaml", doc)
    return proj


def run_in(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "tritonpipeline.cli"]
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.strip() and "\n" not in result.stderr.strip(), result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


@pytest.mark.cli
@pytest.mark.parametrize("force", [True, False], ids=["force", "no-force"])
@pytest.mark.parametrize(
    ("output", "needle"),
    [
        ("models", "is the model source"),  # the example: links to themselves
        (".", "contains the model source"),  # next to the CR: deleted the CR and the models
        ("models/extractor", "lies inside the model source"),
        ("models/new", "lies inside the model source"),
        ("..", "contains the model source"),
    ],
    ids=["source", "cr-dir", "model-dir", "new-dir-inside", "parent"],
)
def test_render_refuses_outputs_overlapping_the_model_source(
    project: Path, output: str, needle: str, force: bool
) -> None:
    before = snapshot(project.parent)
    result = run_in(project, "render", "p.yaml", "-o", output, *(["--force"] if force else []))
    assert_one_line_error(result, needle)
    assert snapshot(project.parent) == before
    assert (project / "models" / "extractor" / "1" / "model.py").read_bytes() == (
        MODELS / "extractor" / "1" / "model.py"
    ).read_bytes()


@pytest.mark.cli
def test_render_compares_resolved_paths(project: Path, tmp_path: Path) -> None:
    """A symlink to the model source (or into it) is the model source."""
    (tmp_path / "to-models").symlink_to(project / "models")
    (tmp_path / "to-extractor").symlink_to(project / "models" / "extractor")
    before = snapshot(project)
    for output in ("to-models", "to-extractor"):
        result = run_in(tmp_path, "render", project / "p.yaml", "-o", output, "--force")
        assert_one_line_error(result, "model source")
    assert snapshot(project) == before


@pytest.mark.cli
def test_render_refuses_a_model_directory_linked_from_elsewhere(project: Path, tmp_path: Path) -> None:
    """A model directory that is a symlink: its real place is model source too."""
    elsewhere = tmp_path / "shared"
    elsewhere.mkdir()
    shutil.move(project / "models" / "join", elsewhere / "join")
    (project / "models" / "join").symlink_to(elsewhere / "join")
    before = snapshot(tmp_path)
    result = run_in(project, "render", "p.yaml", "-o", elsewhere, "--force")
    assert_one_line_error(result, "contains the model source", str(elsewhere / "join"))
    result = run_in(project, "graph", "p.yaml", "-o", elsewhere / "join" / "1" / "model.py")
    assert_one_line_error(result, "lies inside the model source", str(elsewhere / "join"))
    assert snapshot(tmp_path) == before


@pytest.mark.cli
def test_render_refuses_the_models_override_directory(tmp_path: Path) -> None:
    """--models DIR is the model source as well."""
    models = tmp_path / "mine"
    shutil.copytree(MODELS, models, ignore=shutil.ignore_patterns("__pycache__"))
    doc = example("diamond")
    doc["spec"]["modelRepository"]["uri"] = "s3://bucket/models"
    cr = write_cr(tmp_path / "cr.yaml", doc)
    before = snapshot(tmp_path)
    result = run_in(tmp_path, "render", cr, "-o", models, "--models", models, "--force")
    assert_one_line_error(result, "is the model source")
    result = run_in(tmp_path, "graph", cr, "-o", models / "g.mmd", "--models", models)
    assert_one_line_error(result, "lies inside the model source")
    assert snapshot(tmp_path) == before


@pytest.mark.cli
def test_render_refuses_a_directory_holding_the_cr(tmp_path: Path) -> None:
    """Even an earlier render's directory: once the CR lives there, --force leaves it alone."""
    out = tmp_path / "out"
    assert run_in(tmp_path, "render", EXAMPLES / "diamond.yaml", "-o", out).returncode == 0
    cr = write_cr(out / "cr.yaml", example("diamond"))
    before = snapshot(tmp_path)
    result = run_in(tmp_path, "render", cr, "-o", out, "--force")
    assert_one_line_error(result, "contains the TritonPipeline file", str(cr))
    assert snapshot(tmp_path) == before


@pytest.mark.cli
def test_graph_never_overwrites_the_cr(project: Path) -> None:
    before = snapshot(project)
    for fmt in ("mermaid", "svg"):
        result = run_in(project, "graph", "p.yaml", "--format", fmt, "-o", "p.yaml")
        assert_one_line_error(result, "is the TritonPipeline file")
    assert snapshot(project) == before


@pytest.mark.cli
def test_serve_never_writes_into_the_model_source(project: Path) -> None:
    """serve renders into a temporary directory: not one inside the model source (TMPDIR there)."""
    before = snapshot(project)
    env = {**os.environ, "TMPDIR": str(project / "models")}
    ports = [
        f"--{kind}-port={port}" for kind, port in zip(("http", "grpc", "metrics"), free_ports(3), strict=True)
    ]
    cmd = [str(CLI), "serve", "p.yaml", "--cpu", "--timeout", "5", *ports]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=project, env=env)
    assert_one_line_error(result, "lies inside the model source")
    assert snapshot(project) == before


@pytest.mark.cli
def test_force_refuses_a_directory_it_did_not_write(tmp_path: Path) -> None:
    out = tmp_path / "data"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "thesis.tex").write_text("years of work")
    before = snapshot(tmp_path)
    result = run_cli("render", EXAMPLES / "diamond.yaml", "-o", out, "--force")
    assert_one_line_error(result, "was not written by tritonpipeline", "--force")
    assert snapshot(tmp_path) == before


@pytest.mark.cli
@pytest.mark.parametrize(
    "change",
    ["new-file", "new-dir", "file-in-model-dir", "link-replaced-by-dir", "marker-is-a-link", "edited"],
)
def test_force_refuses_a_render_someone_added_to(tmp_path: Path, change: str) -> None:
    out = tmp_path / "repo"
    assert run_cli("render", EXAMPLES / "diamond.yaml", "-o", out).returncode == 0
    if change == "new-file":
        (out / "notes.txt").write_text("mine")
    elif change == "new-dir":
        (out / "mine" / "1").mkdir(parents=True)
    elif change == "file-in-model-dir":
        (out / "join" / "labels.txt").write_text("mine")
    elif change == "link-replaced-by-dir":
        (out / "join" / "1").unlink()
        (out / "join" / "1").mkdir()
        (out / "join" / "1" / "model.py").write_text("# my own copy")
    elif change == "edited":  # a tweak to a generated config was overwritten without a word
        with (out / "extractor" / "config.pbtxt").open("a") as f:
            f.write("# my tweak\n")
    else:
        real = tmp_path / "marker-copy"
        real.write_bytes((out / MARKER).read_bytes())
        (out / MARKER).unlink()
        (out / MARKER).symlink_to(real)
    before = snapshot(tmp_path)
    result = run_cli("render", EXAMPLES / "diamond.yaml", "-o", out, "--force")
    assert_one_line_error(result, "--force")
    assert snapshot(tmp_path) == before


@pytest.mark.cli
def test_force_replaces_an_earlier_render(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    assert run_cli("render", EXAMPLES / "diamond.yaml", "-o", out).returncode == 0
    # what Triton's Python backend leaves next to a generated model.py is not user data
    (router,) = compile_pipeline(parse_pipeline(example("diamond"))).plan.routers
    cache = out / router.name / "1" / "__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"\0")
    result = run_cli("render", EXAMPLES / "fanout.yaml", "-o", out, "--force")
    assert result.returncode == 0, result.stderr
    assert "vision" in names_in(out) and "diamond" not in names_in(out)
    assert names_in(tmp_path) == {"repo"}
    assert (MODELS / "join" / "1" / "model.py").is_file()  # the linked model files were not touched
    result = run_cli("render", EXAMPLES / "streaming.yaml", "-o", out, "--force")
    assert result.returncode == 0, result.stderr
    assert names_in(out) == {"dequantize", "accumulator", "streaming", MARKER}


# --------------------------------------------------------------------------- one line, never a traceback


@pytest.mark.cli
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["render", "-o", "/dev/null/x"], ["'/dev/null/x'", "Not a directory"]),
        (["render", "-o", "/proc/x"], ["'/proc/x'", "No such file or directory"]),
        (["graph", "-o", "/no/such/dir/g.mmd"], ["'/no/such/dir/g.mmd'", "No such file or directory"]),
        (["graph", "-o", "/proc/x/g.mmd"], ["'/proc/x/g.mmd'", "No such file or directory"]),
        (["graph", "-o", "/dev"], ["'/dev'", "Is a directory"]),
        (["graph", "--format", "dot", "-o", "/dev/null/g.dot"], ["'/dev/null/g.dot'", "Not a directory"]),
    ],
    ids=["render-dev-null", "render-proc", "graph-no-dir", "graph-proc", "graph-dir", "graph-dot-dev-null"],
)
def test_unwritable_outputs_are_one_line(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    command, *rest = args
    result = run_in(tmp_path, command, EXAMPLES / "fanout.yaml", *rest)
    assert_one_line_error(result, *needles)


@pytest.mark.cli
def test_graph_image_to_an_unwritable_path_is_one_line(tmp_path: Path) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not installed")
    result = run_in(
        tmp_path, "graph", EXAMPLES / "fanout.yaml", "--format", "svg", "-o", "/no/such/dir/g.svg"
    )
    assert_one_line_error(result, "'/no/such/dir/g.svg'")


@pytest.mark.cli
def test_assemble_with_missing_or_broken_inputs_is_one_line(tmp_path: Path) -> None:
    """A missing directory (the last-resort guard in cli.main) and broken ConfigMap contents are one line
    and exit 1, and nothing is written."""
    result = run_in(
        tmp_path, "assemble", "--generated", tmp_path / "absent", "--source", MODELS, "--out", "o"
    )
    assert_one_line_error(result, str(tmp_path / "absent"))
    generated = tmp_path / "generated"
    generated.mkdir()
    (generated / "manifest-0.json").write_text("{not json")
    result = run_in(tmp_path, "assemble", "--generated", generated, "--source", MODELS, "--out", "o")
    assert_one_line_error(result, "a manifest-*.json in the generated ConfigMaps is not JSON")
    assert not (tmp_path / "o").exists()


@pytest.mark.cli
def test_run_without_credentials_is_one_line(tmp_path: Path) -> None:
    """`tritonpipeline run` makes its API client before kopf starts: no kubeconfig (and no in-cluster
    service account) is one line naming where credentials are looked for, exit 1, nothing started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "TRITONPIPELINE_"))}
    result = run_cli("run", env={**env, "KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HOME": str(tmp_path)})
    assert_one_line_error(result, "no Kubernetes credentials (in-cluster or KUBECONFIG)")


@pytest.mark.cli
def test_run_with_a_name_no_namespace_can_have_is_one_line(tmp_path: Path) -> None:
    """`-n a,b` once ran with one namespace named "a,b": the operator started, and its webhook
    registration failed every 10 s on a label value the API server refused. Both sources take
    comma-separated names and refuse, before anything starts, a name no namespace can have."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "TRITONPIPELINE_"))}
    env = {**env, "KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HOME": str(tmp_path)}
    result = run_cli("run", "-n", "team-a,Team_B", env=env)
    assert_one_line_error(result, "--namespace='team-a,Team_B': 'Team_B' is not a namespace name")
    result = run_cli("run", env={**env, "TRITONPIPELINE_NAMESPACES": "team-a, " + "n" * 64})
    assert_one_line_error(result, "TRITONPIPELINE_NAMESPACES='team-a,nnnn")
    result = run_cli("run", "-n", "team-a,team-b", env=env)  # valid: on to the credentials
    assert_one_line_error(result, "no Kubernetes credentials (in-cluster or KUBECONFIG)")


@pytest.mark.cli
def test_version_is_the_one_pyproject_declares() -> None:
    import tomllib

    declared = tomllib.loads((EXAMPLES.parent / "pyproject.toml").read_text())["project"]["version"]
    result = run_cli("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"tritonpipeline {declared}\n", "")


def alias_bomb(levels: int = 8) -> list[str]:
    """YAML lines defining &b0..&b{levels}: b{levels} expands to 9**levels strings."""
    lines = ['b0: &b0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"b{i}: &b{i} [" + ", ".join([f"*b{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return lines


@pytest.mark.cli
@pytest.mark.parametrize("field", ["maxBatchSize", "dataType", "preferredBatchSizes"])
def test_alias_bomb_gets_a_short_message(tmp_path: Path, field: str) -> None:
    text = (EXAMPLES / "fanout.yaml").read_text()
    header = "x-anchors:\n" + "\n".join("  " + line for line in alias_bomb(7)) + "\n"
    text = header + text
    old = {"maxBatchSize": "8", "dataType": "FP32", "preferredBatchSizes": "[4, 8]"}[field]
    cr = tmp_path / "bomb.yaml"
    cr.write_text(text.replace(f"{field}: {old}", f"{field}: *b7", 1))
    result = run_cli("validate", cr)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "spec.models[0]." in result.stderr
    assert len(result.stderr) < 10_000, result.stderr[:3000]  # the value expands to 9**7 strings
    assert max(len(line) for line in result.stderr.splitlines()) < 500, result.stderr[:3000]


@pytest.mark.cli
def test_huge_scalar_is_quoted_short(tmp_path: Path) -> None:
    doc = example("fanout")
    doc["metadata"]["name"] = "Bad name " * 200_000
    doc["spec"]["models"][0]["maxBatchSize"] = "x" * 1_000_000
    result = run_cli("validate", write_cr(tmp_path / "cr.yaml", doc))
    assert result.returncode == 1
    assert "metadata.name" in result.stderr and "spec.models[0].maxBatchSize" in result.stderr
    assert len(result.stderr) < 1000, result.stderr[:3000]


# --------------------------------------------------------------------------- serve's arguments


@pytest.mark.cli
@pytest.mark.parametrize("value", ["70000", "0", "-1", "65536", "http"])
@pytest.mark.parametrize("flag", ["--http-port", "--grpc-port", "--metrics-port"])
def test_serve_refuses_a_port_out_of_range(flag: str, value: str) -> None:
    result = run_cli("serve", EXAMPLES / "fanout.yaml", "--cpu", f"{flag}={value}", "--timeout", "5")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"argument {flag}: expected a port number 1-65535, got" in result.stderr
    assert "Traceback" not in result.stderr and "starting tritonserver" not in result.stdout


@pytest.mark.cli
@pytest.mark.parametrize(
    ("ports", "clash"),
    [
        ((8000, 8000, 8002), "--http-port and --grpc-port are both 8000"),
        ((8000, 8001, 8000), "--http-port and --metrics-port are both 8000"),
        ((9000, 8001, 8001), "--grpc-port and --metrics-port are both 8001"),
    ],
)
def test_serve_refuses_a_port_used_twice(ports: tuple[int, int, int], clash: str) -> None:
    http, grpc, metrics = map(str, ports)
    args = ["--http-port", http, "--grpc-port", grpc, "--metrics-port", metrics, "--timeout", "5"]
    result = run_cli("serve", EXAMPLES / "fanout.yaml", "--cpu", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert clash in result.stderr
    assert "starting tritonserver" not in result.stdout


@pytest.mark.cli
@pytest.mark.parametrize("output", ["text", "json"])
def test_every_message_is_capped(tmp_path: Path, output: str) -> None:
    """Messages built without quote() (here the compiler's unknown-step error) are capped too."""
    doc = example("fanout")
    doc["spec"]["pipelines"][0]["steps"][1]["inputs"]["FEATS_IN_B"] = "a" * 300_000 + ".T"
    result = run_cli("validate", "--output", output, write_cr(tmp_path / "cr.yaml", doc))
    assert result.returncode == 1
    assert "unknown step 'aaaa" in result.stderr + result.stdout
    assert len(result.stderr + result.stdout) < 5000


@pytest.mark.cli
@pytest.mark.parametrize("name", ["fanout", "diamond", "streaming"])
def test_manifests_are_plain_yaml_without_anchors(tmp_path: Path, name: str) -> None:
    """Objects shared between two places of the manifests (the same env list in the init and Triton
    containers, say) are written out twice, never as `&id001` / `*id001`."""
    doc = example(name, uri="pvc://models/triton")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = run_cli("manifests", path)
    assert result.returncode == 0, result.stderr
    assert not re.search(r"[&*]id\d+", result.stdout), result.stdout
    objects = list(yaml.safe_load_all(result.stdout))
    assert any(o["kind"] == "Deployment" for o in objects)


@pytest.mark.cli
def test_manifests_of_a_gateway_route_say_what_the_operator_reads(tmp_path: Path) -> None:
    """gateway-api without routing.gateway.implementation: the operator reads the policy's kind from the
    Gateway's GatewayClass, so `manifests` leaves the routes out and says so on stderr;
    --gateway-implementation renders what the operator would apply for that implementation."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(example("streaming", uri="pvc://models/triton")))
    result = run_cli("manifests", path)
    assert result.returncode == 0, result.stderr
    assert "routes left out" in result.stderr and "--gateway-implementation" in result.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(result.stdout)]
    assert "HTTPRoute" not in kinds and "Service" in kinds
    for implementation, policy in [
        ("envoy-gateway", "BackendTrafficPolicy"),
        ("istio", "DestinationRule"),
        ("nginx-gateway-fabric", "UpstreamSettingsPolicy"),
    ]:
        result = run_cli("manifests", path, "--gateway-implementation", implementation)
        assert result.returncode == 0 and "left out" not in result.stderr, result.stderr
        kinds = [o["kind"] for o in yaml.safe_load_all(result.stdout)]
        assert kinds[-3:] == ["HTTPRoute", "GRPCRoute", policy], kinds
    result = run_cli("manifests", path, "--gateway-implementation", "traefik")
    assert result.returncode == 2 and "invalid choice: 'traefik'" in result.stderr


@pytest.mark.cli
def test_manifests_of_an_auto_autoscaler_say_what_the_operator_chooses(tmp_path: Path) -> None:
    """autoscaling.engine auto (the default): the operator chooses KEDA where the cluster serves it, so
    `manifests` (which asks no cluster) renders the HPA and says so on stderr; --autoscaling-engine keda
    renders the ScaledObject instead."""
    doc = example("fanout", uri="pvc://models/triton")
    doc["spec"]["autoscaling"] = {"maxReplicas": 3}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = run_cli("manifests", path)
    assert result.returncode == 0, result.stderr
    assert "autoscaling.engine auto" in result.stderr and "--autoscaling-engine keda" in result.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(result.stdout)]
    assert "HorizontalPodAutoscaler" in kinds and "ScaledObject" not in kinds
    result = run_cli("manifests", path, "--autoscaling-engine", "keda")
    assert result.returncode == 0 and "autoscaling.engine" not in result.stderr, result.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(result.stdout)]
    assert kinds[-1] == "ScaledObject" and "HorizontalPodAutoscaler" not in kinds


@pytest.mark.cli
def test_serve_router_native_without_a_compiler_says_why(tmp_path: Path) -> None:
    """--router native insists: exit 1 with the reason, and no server is started."""
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    result = run_cli("serve", EXAMPLES / "fanout.yaml", "--cpu", "--router", "native", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "--router native: no C compiler" in result.stderr and "no-such-cc" in result.stderr
    assert "starting tritonserver" not in result.stdout
