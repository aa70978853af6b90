"""`tritonpipeline validate|render|graph` in-process (cli.main) and as the installed console script.
Here the pure tests; those on real components are in tests/component/test_cli.py."""

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

import pytest
import yaml

from helpers import CLI, EXAMPLES, MODELS, ROOT, example, native_router_or_skip
from support.cli import (
    EXAMPLE_FILES,
    _router_name,
    names_in,
    snapshot,
    write_cr,
)
from tritonpipeline import cli
from tritonpipeline.compiler import compile_pipeline, router_source
from tritonpipeline.compiler.plan_types import LINK_TO_MODEL_FILE
from tritonpipeline.compiler.triton_config import parse_text
from tritonpipeline.errors import SpecError
from tritonpipeline.local.repository import MARKER, write_repository
from tritonpipeline.spec import parse_pipeline

# --------------------------------------------------------------------------- validate


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_validate_examples_in_process(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    assert f"'{name}' is valid" in out
    assert err == ""


def test_validate_invalid_in_process(invalid_cr: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(invalid_cr)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{invalid_cr}: spec.pipelines[0].steps[1].inputs.FEATS_IN_B: unknown step 'rigth'" in err


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


def test_render_remote_uri_writes_configs_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = example("fanout")
    doc["spec"]["modelRepository"]["uri"] = "s3://bucket/models"
    cr = write_cr(tmp_path / "cr.yaml", doc)
    assert cli.main(["render", str(cr), "-o", str(tmp_path / "repo")]) == 0
    assert "s3://bucket/models" in capsys.readouterr().out
    assert not (tmp_path / "repo" / "extractor" / "1").exists()
    assert (tmp_path / "repo" / "extractor" / "config.pbtxt").is_file()


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


def test_graph_png_without_graphviz_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli.cmd_graph.shutil, "which", lambda _name: None)
    target = tmp_path / "g.png"
    assert cli.main(["graph", str(EXAMPLES / "fanout.yaml"), "--format", "png", "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert "Graphviz" in err and "dot" in err and "mermaid" in err
    assert not target.exists()


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


def test_serve_router_auto_falls_back_to_python_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    (compiled,) = cli.compile_file(str(EXAMPLES / "fanout.yaml"), cpu_only=True)
    chosen = cli.cmd_serve.with_router(compiled, "auto", True)
    assert chosen.artifacts.router_backend == "python" and chosen is compiled
    said = capsys.readouterr().out
    assert "note: the routers and conditions run on the Python backend (no C compiler" in said
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


def test_serve_takes_the_native_switch_for_conditions_without_routers(tmp_path: Path) -> None:
    """A pipeline with conditions and no fan-out (no router) still gets the native switch: serve kept it
    on the Python orchestrator, as the routers' choice was made only where the pipeline had routers."""
    native_router_or_skip()
    doc = example("conditional")
    doc["spec"]["pipelines"] = doc["spec"]["pipelines"][1:]  # `switched`: a switch, no router
    doc["spec"]["modelRepository"]["uri"] = str(MODELS)
    (compiled,) = cli.compile_file(str(write_cr(tmp_path / "cr.yaml", doc)), cpu_only=True)
    assert not compiled.artifacts.plan.routers and compiled.artifacts.plan.orchestrators
    chosen = cli.cmd_serve.with_router(compiled, "native", True)
    assert chosen.artifacts.router_backend == "native"
    assert "switched__switch/config.pbtxt" in chosen.artifacts.files
    assert "switched/1/model.py" not in chosen.artifacts.files


@pytest.mark.parametrize(
    ("flag", "spec", "native"),
    [
        ([], "auto", False),
        ([], "native", True),
        (["--router", "native"], "auto", True),
        (["--router", "python"], "native", False),
    ],
)
def test_render_writes_the_routers_and_conditions_on_the_backend_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str], spec: str, native: bool
) -> None:
    """render honours --router, else spec.server.router (auto: the Python backend, which any tritonserver
    runs; the native library is built here, for this machine's architecture)."""
    native_router_or_skip()
    doc = example("conditional")
    doc["spec"]["modelRepository"]["uri"] = str(MODELS)
    doc["spec"]["server"]["router"] = spec
    out = tmp_path / "repo"
    assert cli.main(["render", str(write_cr(tmp_path / "cr.yaml", doc)), "-o", str(out), *flag]) == 0
    said = capsys.readouterr().out
    assert (out / "switched__switch" / "1" / "libtriton_tprouter.so").is_file() is native
    assert (out / "switched" / "1" / "model.py").is_file() is not native
    router = out / "conditional__when1__large__OUTPUT_B__router" / "config.pbtxt"
    assert ('backend: "tprouter"' in router.read_text()) is native
    assert f"conditions of 'switched': {'the native switch' if native else 'a generated Python'}" in said


@pytest.mark.parametrize(
    ("router", "said"),
    [
        ("native", "the native switch in its ensemble, every branch run for every request (speculative)"),
        ("python", "a generated Python orchestrator (speculative needs the native switch: the branches wait"),
    ],
)
def test_render_says_where_a_pipeline_is_speculative(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], router: str, said: str
) -> None:
    """`speculative: true` is honoured by the native switch; under the Python orchestrator render says it
    is not (the answers are the same; only when the branches run differs)."""
    native_router_or_skip()
    doc = example("conditional")
    doc["spec"]["modelRepository"]["uri"] = str(MODELS)
    doc["spec"]["pipelines"][1]["speculative"] = True
    out = tmp_path / "repo"
    cr = str(write_cr(tmp_path / "cr.yaml", doc))
    assert cli.main(["render", cr, "-o", str(out), "--router", router]) == 0
    text = capsys.readouterr().out
    assert f"conditions of 'switched': {said}" in text
    (other,) = [line for line in text.splitlines() if "conditions of 'conditional': " in line]
    assert "speculative" not in other  # the pipeline that did not ask


@pytest.mark.parametrize(
    ("flag", "asked"), [([], "spec.server.router: native"), (["--router", "native"], "--router native")]
)
def test_render_without_a_compiler_names_what_asked_for_the_native_router(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: list[str],
    asked: str,
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    doc = example("conditional")
    doc["spec"]["modelRepository"]["uri"] = str(MODELS)
    doc["spec"]["server"]["router"] = "native" if not flag else "auto"
    out = tmp_path / "repo"
    assert cli.main(["render", str(write_cr(tmp_path / "cr.yaml", doc)), "-o", str(out), *flag]) == 1
    assert f"{asked}: no C compiler" in capsys.readouterr().err
    assert not out.exists()  # nothing written
