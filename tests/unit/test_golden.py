"""The compiler against reviewed golden outputs, and the same bytes in every process.

tests/golden/<name>/repository/ holds the config.pbtxt files the compiler generates for one document:
examples/<name>.yaml, or tests/golden/<name>/pipeline.yaml for the odd shapes. Each file was read
against Triton's ensemble semantics before it was committed (tests/golden/README.md says what to check).
After an intended change of the output, regenerate with `make golden` and review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import EXAMPLES, ROOT
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.spec import parse_text

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"  # set by `make golden`
CONFIG = "config.pbtxt"


def golden_names() -> list[str]:
    """Every example, and every odd shape under tests/golden/."""
    examples = {p.stem for p in EXAMPLES.glob("*.yaml")}
    return sorted(examples | {p.name for p in GOLDEN.iterdir() if p.is_dir()})


def source_of(name: str) -> Path:
    """The document a golden directory is generated from."""
    own = GOLDEN / name / "pipeline.yaml"
    return own if own.exists() else EXAMPLES / f"{name}.yaml"


def compiled_configs(source: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every config.pbtxt generated for the document(s) in `source`."""
    files: dict[str, bytes] = {}
    for tp in parse_text(source.read_text(), str(source)):
        files.update(compile_pipeline(tp).files)
    return {path: data for path, data in files.items() if path.endswith(f"/{CONFIG}")}


def committed_configs(name: str) -> dict[str, bytes]:
    repo = GOLDEN / name / "repository"  # missing for an example not yet recorded: no files
    return {p.relative_to(repo).as_posix(): p.read_bytes() for p in sorted(repo.rglob(CONFIG))}


def write_golden(name: str, generated: dict[str, bytes]) -> list[str]:
    """Write the generated files; returns the committed ones no longer generated (left for `git rm`)."""
    repo = GOLDEN / name / "repository"
    for path, data in generated.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    return sorted(set(committed_configs(name)) - set(generated))


def mismatch_report(name: str, committed: dict[str, bytes], generated: dict[str, bytes]) -> str:
    lines = [f"golden {name!r} differs from the compiler's output (regenerate: `make golden`, then review):"]
    for path in sorted(set(committed) | set(generated)):
        if path not in generated:
            lines.append(f"  no longer generated: {path}")
        elif path not in committed:
            lines.append(f"  generated but not committed: {path}")
        elif committed[path] != generated[path]:
            diff = difflib.unified_diff(
                committed[path].decode().splitlines(),
                generated[path].decode().splitlines(),
                f"golden/{name}/repository/{path}",
                "generated",
                lineterm="",
            )
            lines.extend(f"  {line}" for line in diff)
    return "\n".join(lines)


def test_every_golden_has_a_source() -> None:
    assert len(list(EXAMPLES.glob("*.yaml"))) >= 3
    for name in golden_names():
        assert source_of(name).exists(), f"tests/golden/{name}/ has no pipeline.yaml and no example"


@pytest.mark.parametrize("name", golden_names())
def test_compiler_output_matches_the_golden(name: str) -> None:
    generated = compiled_configs(source_of(name))
    assert generated, f"{source_of(name)} generated no config"
    if UPDATE:
        stale = write_golden(name, generated)
        assert not stale, f"remove the stale golden files of {name!r}: {stale}"
    committed = committed_configs(name)
    if committed != generated:
        pytest.fail(mismatch_report(name, committed, generated), pytrace=False)


def test_mismatch_report_shows_a_diff_and_missing_files() -> None:
    committed = {"m/config.pbtxt": b'name: "m"\nmax_batch_size: 8\n', "gone/config.pbtxt": b""}
    generated = {"m/config.pbtxt": b'name: "m"\nmax_batch_size: 4\n', "new/config.pbtxt": b""}
    report = mismatch_report("g", committed, generated).splitlines()
    assert "  -max_batch_size: 8" in report and "  +max_batch_size: 4" in report
    assert "  no longer generated: gone/config.pbtxt" in report
    assert "  generated but not committed: new/config.pbtxt" in report
    assert "make golden" in report[0]


# --------------------------------------------------------------------------- determinism across processes

DIGESTS = """
import json, random, sys
import pipeline_gen as gen
from unit.test_golden import GOLDEN, golden_names, source_of
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.spec import parse_pipeline, parse_text

out = {}
for name in golden_names():
    for k, tp in enumerate(parse_text(source_of(name).read_text(), name)):
        out[f"{name}/{k}"] = compile_pipeline(tp).files
for seed in range(int(sys.argv[1])):
    rng = random.Random(seed)
    family = [gen.PipelineGenerator(rng, f"p{i}", decoupled_rate=0.0).generate() for i in range(3)]
    for fan_out in ("router", "shared"):
        doc = gen.document("family", "pvc://models/repo", family)
        for p in doc["spec"]["pipelines"]:
            p["fanOut"] = fan_out
        out[f"generated/{seed}/{fan_out}"] = compile_pipeline(parse_pipeline(doc)).files
print(json.dumps({k: {p: d.hex() for p, d in files.items()} for k, files in out.items()}, sort_keys=True))
"""
GENERATED_FAMILIES = 8


def compiled_in_subprocess(hash_seed: str) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": path}
    return subprocess.Popen(
        [sys.executable, "-c", DIGESTS, str(GENERATED_FAMILIES)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_output_is_byte_identical_under_any_hash_seed() -> None:
    """Set and dict-of-set iteration order changes with PYTHONHASHSEED; the generated bytes must not."""
    seeds = ["0", "1"]
    runs = [compiled_in_subprocess(seed) for seed in seeds]  # in parallel
    outputs = []
    for seed, run in zip(seeds, runs, strict=True):
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, f"PYTHONHASHSEED={seed}: {stderr[-2000:]}"
        outputs.append(json.loads(stdout))
    first = outputs[0]
    assert len(first) >= len(golden_names()) + 2 * GENERATED_FAMILIES
    assert any("router" in path for files in first.values() for path in files)
    for seed, other in zip(seeds[1:], outputs[1:], strict=True):
        differ = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
        assert not differ, f"PYTHONHASHSEED=0 and ={seed} compile differently: {differ}"
