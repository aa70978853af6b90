"""The package's extras: the core runs without them, a command whose extra is missing says which one to
install in one line, and the model-config schema carried in the core is tritonclient's own.
Here the tests on real components; the pure ones are in tests/unit/test_extras.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import EXAMPLES
from support.extras import without

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
