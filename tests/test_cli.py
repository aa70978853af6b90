"""`tritonpipeline validate|render|graph` in-process (cli.main) and as the installed console script."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import CLI, EXAMPLES, MODELS, ROOT, example
from tritonpipeline import cli
from tritonpipeline.compiler import compile_pipeline, router_source
from tritonpipeline.compiler.plan_types import LINK_TO_MODEL_FILE
from tritonpipeline.compiler.triton_config import parse_text
from tritonpipeline.errors import SpecError
from tritonpipeline.local.repository import MARKER, write_repository
from tritonpipeline.local.tritonserver import free_ports
from tritonpipeline.spec import parse_pipeline

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "tritonpipeline.cli"]
    return subprocess.run(
        [*cmd, *map(str, args)], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def write_cr(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def invalid_cr(tmp_path: Path) -> Path:
    doc = example("diamond")
    doc["spec"]["pipelines"][0]["steps"][1]["inputs"]["FEATS_IN_B"] = "rigth.OUTPUT_C"
    return write_cr(tmp_path / "invalid.yaml", doc)


def names_in(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


# --------------------------------------------------------------------------- validate


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_validate_examples_in_process(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    assert f"'{name}' is valid" in out
    assert err == ""


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


def test_validate_invalid_in_process(invalid_cr: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(invalid_cr)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{invalid_cr}: spec.pipelines[0].steps[1].inputs.FEATS_IN_B: unknown step 'rigth'" in err


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


def test_validate_mixed_files_reports_each(invalid_cr: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(EXAMPLES / "fanout.yaml"), str(invalid_cr)]) == 1
    out, err = capsys.readouterr()
    assert "'vision' is valid" in out
    assert "unknown step 'rigth'" in err


def test_validate_json_output(invalid_cr: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = EXAMPLES / "fanout.yaml"
    assert cli.main(["validate", "--output", "json", str(good), str(invalid_cr)]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    report = json.loads(out)
    assert [r["file"] for r in report] == [str(good), str(invalid_cr)]
    ok, bad = report
    assert ok["valid"] is True and ok["errors"] == []
    (pipeline,) = ok["pipelines"]
    assert pipeline["name"] == "vision"
    assert len(pipeline["digest"]) == 64 and int(pipeline["digest"], 16) >= 0
    assert pipeline["digest"] == compile_pipeline(parse_pipeline(yaml.safe_load(good.read_text()))).digest()
    (ens,) = pipeline["graph"]["ensembles"]
    assert ens["name"] == "vision" and ens["maxBatchSize"] == 8
    (router,) = pipeline["graph"]["routers"]
    assert router["source"] == "extract.FEATS_A"
    assert sorted(router["consumers"]) == ["head_b.FEATS_IN_B", "head_c.FEATS_IN_C", "outputs.FEATURES"]
    assert bad["valid"] is False and bad["pipelines"] == []
    assert {"source": str(invalid_cr), "path": "spec.pipelines[0].steps[1].inputs.FEATS_IN_B"}.items() <= bad[
        "errors"
    ][0].items()
    assert "unknown step 'rigth'" in bad["errors"][0]["message"]


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


def test_validate_with_models_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = example("diamond")
    doc["spec"]["modelRepository"]["uri"] = str(tmp_path / "nowhere")
    cr = write_cr(tmp_path / "cr.yaml", doc)
    assert cli.main(["validate", str(cr)]) == 1
    assert "spec.modelRepository.uri" in capsys.readouterr().err
    assert cli.main(["validate", str(cr), "--models", str(MODELS)]) == 0


# --------------------------------------------------------------------------- render


def test_render_writes_a_linked_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "repo"
    assert cli.main(["render", str(EXAMPLES / "fanout.yaml"), "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    artifacts = compile_pipeline(parse_pipeline(example("fanout")))
    (router,) = artifacts.plan.routers
    assert router.name in stdout
    assert names_in(out) == {"extractor", "head_b", "head_c", "vision", router.name, MARKER}
    for model in ("extractor", "head_b", "head_c"):
        version = out / model / "1"
        assert os.path.islink(version), f"{version} should link to the model files"
        assert version.resolve() == (MODELS / model / "1").resolve()
        assert (version / "model.py").is_file()
        cfg = out / model / "config.pbtxt"
        assert not cfg.is_symlink()
        assert cfg.read_bytes() == artifacts.files[f"{model}/config.pbtxt"]
        assert parse_text(cfg.read_bytes()).name == model
    # generated models are real files
    assert not (out / router.name / "1").is_symlink()
    assert (out / router.name / "1" / "model.py").read_bytes() == router_source()
    assert parse_text((out / "vision" / "config.pbtxt").read_bytes()).platform == "ensemble"
    assert (out / "vision" / "1").is_dir()
    # nothing but the repository was created next to it
    assert names_in(tmp_path) == {"repo"}


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


def test_render_into_empty_existing_dir_is_fine(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    out.mkdir()
    assert cli.main(["render", str(EXAMPLES / "streaming.yaml"), "-o", str(out)]) == 0
    assert {"dequantize", "accumulator", "streaming", MARKER} == names_in(out)


def test_render_onto_a_file_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    assert cli.main(["render", str(EXAMPLES / "streaming.yaml"), "-o", str(target)]) == 1
    assert "not a directory" in capsys.readouterr().err
    assert target.read_text() == "x"


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


def test_unreadable_model_source_leaves_nothing_behind(tmp_path: Path) -> None:
    artifacts = compile_pipeline(parse_pipeline(example("diamond")))
    models = tmp_path / "models"
    (models / "extractor" / "1").mkdir(parents=True)  # the other model dirs are missing
    with pytest.raises(SpecError, match=r"cannot read model directory '.*/head_b'"):
        write_repository(artifacts, tmp_path / "repo", models)
    assert names_in(tmp_path) == {"models"}


@dataclass(frozen=True)
class Generated:
    """What the assemble command gets from ConfigMaps: any paths, not only the compiler's."""

    files: dict[str, bytes]
    models: tuple[str, ...]


@pytest.mark.parametrize("rel", ["extractor/1/model.py", "extractor/1"])
def test_failed_write_never_writes_through_a_model_link(tmp_path: Path, rel: str) -> None:
    models = tmp_path / "models"
    shutil.copytree(MODELS / "extractor", models / "extractor", ignore=shutil.ignore_patterns("__pycache__"))
    before = snapshot(models)
    with pytest.raises(SpecError, match="would overwrite the model file"):
        write_repository(Generated({rel: b"evil"}, ("extractor",)), tmp_path / "repo", models)
    assert snapshot(models) == before
    assert names_in(tmp_path) == {"models"}  # the temporary directory is gone


@pytest.mark.parametrize("label", ["labels.txt", "../head_b/1/model.py", "missing.txt", "1"])
def test_a_routers_labels_file_links_to_the_models_own(tmp_path: Path, label: str) -> None:
    """A generated LINK_TO_MODEL_FILE becomes a link to that file of a declared model (the router's
    labels); one outside the model's directory, missing, or not a file is refused, nothing written."""
    models = tmp_path / "models"
    for model in ("extractor", "head_b"):
        shutil.copytree(MODELS / model, models / model, ignore=shutil.ignore_patterns("__pycache__"))
    (models / "extractor" / "labels.txt").write_text("cat\ndog\n")
    files = {
        "r/labels.txt": LINK_TO_MODEL_FILE + f"extractor/{label}".encode(),
        "r/config.pbtxt": b"name: 'r'",
    }
    generated = Generated(files, ("extractor", "head_b"))
    if label != "labels.txt":
        with pytest.raises(
            SpecError, match=f"labelFilename '{re.escape(label)}' of model 'extractor' is not a file"
        ):
            write_repository(generated, tmp_path / "repo", models)
        assert names_in(tmp_path) == {"models"}
        return
    out = write_repository(generated, tmp_path / "repo", models)
    assert (out / "r" / "labels.txt").is_symlink()
    assert (out / "r" / "labels.txt").read_text() == "cat\ndog\n"
    unlinked = write_repository(generated, tmp_path / "configs", None)  # no model files: as written
    assert (unlinked / "r" / "labels.txt").read_bytes() == files["r/labels.txt"]


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


def test_render_remote_uri_writes_configs_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = example("fanout")
    doc["spec"]["modelRepository"]["uri"] = "s3://bucket/models"
    cr = write_cr(tmp_path / "cr.yaml", doc)
    assert cli.main(["render", str(cr), "-o", str(tmp_path / "repo")]) == 0
    assert "s3://bucket/models" in capsys.readouterr().out
    assert not (tmp_path / "repo" / "extractor" / "1").exists()
    assert (tmp_path / "repo" / "extractor" / "config.pbtxt").is_file()


# --------------------------------------------------------------------------- graph


def _router_name(example_name: str) -> str:
    (router,) = compile_pipeline(parse_pipeline(example(example_name))).plan.routers
    return router.name


def test_graph_mermaid_marks_the_router(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["graph", str(EXAMPLES / "fanout.yaml")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("flowchart")
    name = _router_name("fanout")
    router_lines = [line for line in text.splitlines() if name in line]
    assert router_lines, text
    node_id = router_lines[0].strip().split("{", 1)[0]
    assert f"class {node_id} router" in text
    assert "classDef router" in text
    # the other nodes are not marked as routers
    assert sum(1 for line in text.splitlines() if line.strip().startswith("class ")) == 1
    for label in ("input IMAGE", "output FEATURES", "output SCORE_B", "output SCORE_C", "head_b", "head_c"):
        assert label in text


def test_graph_mermaid_without_routers(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["graph", str(EXAMPLES / "streaming.yaml")]) == 0
    text = capsys.readouterr().out
    assert "class " not in text.replace("classDef", "")
    assert "accumulator" in text and "dequantize" in text


def test_graph_names_the_version_a_step_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((EXAMPLES / "diamond.yaml").read_text())
    doc["spec"]["modelRepository"]["uri"] = str(MODELS)
    doc["spec"]["pipelines"][0]["steps"][1]["version"] = 1  # the one version directory there
    cr = tmp_path / "pinned.yaml"
    cr.write_text(yaml.safe_dump(doc))
    assert cli.main(["graph", str(cr)]) == 0
    text = capsys.readouterr().out
    assert '"left (head_b, version 1)"' in text and '"right (head_c)"' in text, text


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


def test_graph_png_without_graphviz_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli.cmd_graph.shutil, "which", lambda _name: None)
    target = tmp_path / "g.png"
    assert cli.main(["graph", str(EXAMPLES / "fanout.yaml"), "--format", "png", "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert "Graphviz" in err and "dot" in err and "mermaid" in err
    assert not target.exists()


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


# --------------------------------------------------------------------------- no command destroys user files


def snapshot(root: Path) -> dict[str, str | bytes]:
    """Every entry under root, symlinks not followed: file bytes, link targets, and directories."""
    out: dict[str, str | bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_bytes()
    return out


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


SHELL_OPERATORS = ("|", ">", ">>", "&&", ";")
REPOSITORY_PATHS = ("examples/", "model_repository")  # what an example reads from the repository


def example_arguments(line: str) -> list[str]:
    """The arguments of the `tritonpipeline` command in an example's shell line (`sed ... | tritonpipeline
    manifests - | kubectl diff -f -`): from the word after it to the next shell operator."""
    words = shlex.split(line)
    start = words.index("tritonpipeline") + 1
    end = next((i for i, w in enumerate(words[start:], start) if w in SHELL_OPERATORS), len(words))
    return words[start:end]


def test_every_command_has_help_examples_that_parse_and_whose_files_exist() -> None:
    """Every command's --help ends with examples (issue 55), the top level's with each command's first:
    each is a command line this parser takes, for the command it is listed under, and the repository files
    it reads (an example pipeline, the model repository) exist."""
    parser = cli.build_parser()
    commands = set(cli.EXAMPLES)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert commands == set(sub.choices), "every command, and only those, has examples"
    for command, examples in cli.EXAMPLES.items():
        assert examples, command
        help_text = sub.choices[command].format_help()
        for line, what in examples:
            arguments = example_arguments(line)
            args = parser.parse_args(arguments)
            assert args.command == command and callable(args.func), line
            for word in shlex.split(line):
                if word.startswith(REPOSITORY_PATHS):
                    assert (ROOT / word).exists(), f"{line}: {word} is not in the repository"
            assert f"\n  {line}\n      {what}\n" in help_text + "\n", help_text
    top = parser.format_help()
    for command, examples in cli.EXAMPLES.items():
        assert (f"\n  {examples[0][0]}\n" in top) == (command not in cli.INTERNAL_COMMANDS), command


@pytest.mark.cli
def test_version_is_the_one_pyproject_declares() -> None:
    import tomllib

    declared = tomllib.loads((EXAMPLES.parent / "pyproject.toml").read_text())["project"]["version"]
    result = run_cli("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"tritonpipeline {declared}\n", "")


def test_the_load_progress_names_the_models_still_loading() -> None:
    from tritonpipeline.local.tritonserver import loading_progress

    log = "\n".join(
        [
            'I1129 12:00:00.1 1 model_lifecycle.cc:469] "loading: head_a:1"',
            'I1129 12:00:00.2 1 model_lifecycle.cc:469] "loading: head_c:1"',
            'I1129 12:00:00.3 1 model_lifecycle.cc:469] "loading: tail:1"',
            "I1129 12:00:01.0 1 model_lifecycle.cc:849] \"successfully loaded 'head_a'\"",
            "E1129 12:00:02.0 1 model_lifecycle.cc:654] \"failed to load 'tail' version 1: ...\"",
        ]
    )
    assert loading_progress(log, 12.4) == "  ... 12s: 2 of 3 models done; waiting for head_c"
    assert loading_progress("", 5) == "  ... 5s: tritonserver is starting"


def test_a_load_failure_is_read_from_the_log(tmp_path: Path) -> None:
    """The cause of a failed load as tritonserver logs it (the reason escaped, the Python backend's
    traceback innermost first), and the user's file it points at through the repository's link."""
    import time

    from tritonpipeline.local.tritonserver import first_load_time, last_error, load_failures

    version = tmp_path / "models" / "head_c" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("...")
    repo = tmp_path / "repository"
    (repo / "head_c").mkdir(parents=True)
    (repo / "head_c" / "1").symlink_to(version)
    inner = f"{repo}/head_c/1/model.py"
    log = "\n".join(
        [
            'E1129 22:05:40.000001 1 server.cc:241] "CudaDriverHelper has not been initialized."',
            'I1129 22:05:41.485558 1 model_lifecycle.cc:472] "loading: head_c:1"',
            "E1129 22:05:53.510144 1 model_lifecycle.cc:642] \"failed to load 'head_c' version 1: Internal: "
            f"ValueError: no weights\\n\\nAt:\\n  /usr/lib/x.py(3): f\\n  {inner}(12): load\\n  {inner}(9): "
            'initialize\\n"',
            "E1129 22:05:53.510145 1 model_lifecycle.cc:642] \"failed to load 'join' version 2: Internal: "
            'SyntaxError: invalid syntax (model.py, line 3)"',
        ]
    )
    (failure, syntax) = load_failures(log, repo)
    assert (
        failure.describe()
        == f"model head_c version 1 failed to load: ValueError: no weights ({version}/model.py line 12)"
    )
    assert (
        syntax.describe()
        == "model join version 2 failed to load: SyntaxError: invalid syntax (model.py, line 3)"
    )
    # where no model failed: the first error but the one of every machine without a GPU
    assert last_error(log) == "failed to load 'head_c' version 1: Internal: ValueError: no weights"
    now = time.mktime((2026, 11, 29, 23, 0, 0, 0, 0, -1))
    assert first_load_time(log, now) == time.mktime((2026, 11, 29, 22, 5, 41, 0, 0, -1)) + 0.485558
    # the New Year: a December line read in January is last year's
    january = time.mktime((2027, 1, 1, 0, 0, 10, 0, 0, -1))
    assert (
        first_load_time(log.replace("I1129", "I1231"), january)
        == time.mktime((2026, 12, 31, 22, 5, 41, 0, 0, -1)) + 0.485558
    )


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--host", "localhost"], "argument --host: expected an IP address such as 127.0.0.1"),
        (["--host", "256.1.1.1"], "argument --host: expected an IP address"),
        (["--timeout", "0"], "argument --timeout: expected a number of seconds above 0, got '0'"),
        (["--timeout", "nan"], "argument --timeout: expected a number of seconds above 0"),
        (["--timeout", "-5"], "argument --timeout: expected a number of seconds above 0"),
        (["--exit-timeout", "-1"], "argument --exit-timeout: expected a whole number of seconds"),
    ],
)
def test_serve_refuses_what_it_cannot_serve_with(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--host localhost` bound Triton's HTTP service to 255.255.255.255 (it takes IP literals only) and
    serve waited out its timeout; a timeout of 0, -5 or nan failed after starting the server."""
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["serve", "x.yaml", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_serve_takes_ip_addresses_as_given() -> None:
    for given, taken in (("::1", "::1"), ("[::1]", "::1"), ("0.0.0.0", "0.0.0.0")):
        assert cli.build_parser().parse_args(["serve", "x.yaml", "--host", given]).host == taken


def test_serve_accepts_the_port_range_ends() -> None:
    args = cli.build_parser().parse_args(["serve", "x.yaml", "--http-port", "1", "--grpc-port", "65535"])
    assert (args.http_port, args.grpc_port, args.metrics_port) == (1, 65535, 8002)


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


def test_graph_mermaid_escapes_quotes_and_hashes_in_tensor_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tensor names may hold `"` and `#` (exported models do); in Mermaid they must not end a label."""
    doc = example("fanout")
    renames = {"FEATS_A": 'feats"a#1', "FEATS_IN_B": "in#b"}
    text = yaml.safe_dump(doc)
    for old, new in renames.items():
        text = text.replace(old, new)
    cr = tmp_path / "cr.yaml"
    cr.write_text(text)
    models = tmp_path / "models"
    models.mkdir()
    for m in ("extractor", "head_b", "head_c"):
        (models / m / "1").mkdir(parents=True)
        (models / m / "1" / "model.py").write_text("")
    assert cli.main(["graph", str(cr), "--models", str(models)]) == 0
    out = capsys.readouterr().out
    assert "feats#quot;a#35;1" in out and "in#35;b" in out
    for line in out.splitlines():
        assert line.count('"') % 2 == 0, line  # every quoted label is closed


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


def test_serve_router_auto_falls_back_to_python_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    (compiled,) = cli.compile_file(str(EXAMPLES / "fanout.yaml"), cpu_only=True)
    chosen = cli.cmd_serve.with_router(compiled, "auto", True)
    assert chosen.artifacts.router_backend == "python" and chosen is compiled
    assert "note: the routers run on the Python backend (no C compiler" in capsys.readouterr().out
    assert [r["backend"] for r in chosen.artifacts.graph_summary()["routers"]] == ["python"]


@pytest.mark.parametrize(
    ("given", "words"), [("/nonexistent", "does not exist"), (__file__, "is not a directory")]
)
def test_a_models_directory_that_is_not_one_is_named_as_the_flag(
    given: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was blamed on spec.modelRepository.uri, which the flag overrides."""
    assert cli.main(["validate", str(EXAMPLES / "diamond.yaml"), "--models", given]) == 1
    assert f"--models {given!r} {words}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command", [["render", "x.yaml", "-o"], ["graph", "x.yaml", "-o"], ["import", "r", "-o"]]
)
def test_an_empty_output_path_is_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`render -o ""` rendered into the current directory."""
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args([*command, ""])
    assert exit_info.value.code == 2 and "expected a path, got an empty one" in capsys.readouterr().err


def test_a_pipeline_read_from_standard_input(tmp_path: Path) -> None:
    """`kubectl get tp vision -o yaml | tritonpipeline validate -`: `-` reads standard input; a relative
    modelRepository.uri is then taken from the working directory."""
    cmd = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "tritonpipeline.cli"]
    text = (EXAMPLES / "fanout.yaml").read_text()

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cmd, *args], input=text, capture_output=True, text=True, timeout=120, cwd=cwd, check=False
        )

    ok = run("validate", "-", cwd=EXAMPLES)
    assert ok.returncode == 0, ok.stderr
    assert (
        ok.stdout.strip()
        == "-: TritonPipeline 'vision' is valid (3 model(s), 1 ensemble(s), 1 router(s) inserted)"
    )
    elsewhere = run("validate", "-", cwd=tmp_path)
    assert elsewhere.returncode == 1
    assert "model repository directory" in elsewhere.stderr and "does not exist" in elsewhere.stderr
    rendered = run("render", "-", "-o", str(tmp_path / "repo"), cwd=EXAMPLES)
    assert rendered.returncode == 0, rendered.stderr
    assert (tmp_path / "repo" / "vision" / "config.pbtxt").is_file()
    # `-` is no file of the working directory that an output could overwrite
    text = text.replace("uri: ../model_repository", f"uri: {(EXAMPLES / '../model_repository').resolve()}")
    graph = run("graph", "-", "-o", "-", cwd=tmp_path)  # a file named `-` here: not the pipeline's
    assert graph.returncode == 0, graph.stderr
    assert (tmp_path / "-").read_text().startswith("flowchart")
    twice = run("validate", "-", "-", cwd=EXAMPLES)
    assert (twice.returncode, twice.stderr.strip()) == (2, "error: - (standard input) can be given once")
