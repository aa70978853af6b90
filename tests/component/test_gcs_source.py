"""The init container's gs:// download with the real google-cloud-storage client against a server of
Cloud Storage's JSON API on loopback: fake-gcs-server (github.com/fsouza/fake-gcs-server, built from Go
modules; the client points at it with STORAGE_EMULATOR_HOST). It implements listing, media download and
"folder" objects as Cloud Storage does, but no authentication: the service-account key file is proven
only as rendered (tests/unit/test_source_storage.py), not as accepted by Google."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.gotools import tool_path
from storage_helpers import (
    FANOUT_MODELS,
    MODELS,
    NESTED,
    assert_assembled,
    fanout_from,
    rendered_init,
    source_arg,
)
from tritonpipeline.errors import SpecError
from tritonpipeline.local.assemble import assemble
from tritonpipeline.local.tritonserver import free_port

pytestmark = pytest.mark.gcsserver

BUCKET, PREFIX = "models", "team/triton"


def _binary() -> Path:
    path = tool_path("fake-gcs-server")
    if not path.is_file():
        pytest.skip(
            f"fake-gcs-server is not built: run `bash e2e/build-gotool.sh fake-gcs-server` (-> {path})"
        )
    return path


@pytest.fixture(scope="module")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fake-gcs-server on a free loopback port (in memory), ended by its PID."""
    binary, port = _binary(), free_port()
    workdir = tmp_path_factory.mktemp("gcs")
    cmd = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory"]
    cmd += ["-public-host", f"127.0.0.1:{port}", "-log-level", "warn"]
    with (workdir / "server.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((workdir / "server.log").read_text()[-2000:]) from None
                time.sleep(0.3)
        yield endpoint
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def emulator(gcs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    return gcs_endpoint


@pytest.fixture
def uploaded(emulator: str) -> list[str]:
    """model_repository/ plus a nested file, with a folder object for every directory."""
    from google.cloud import storage

    client = storage.Client()
    bucket = client.lookup_bucket(BUCKET) or client.create_bucket(BUCKET)
    names = []
    for model in FANOUT_MODELS:
        root = MODELS / model
        files = [p for p in root.rglob("*") if "__pycache__" not in p.parts]
        for path in sorted([root, *files]):
            relative = path.relative_to(root).as_posix()
            name = f"{PREFIX}/{model}" + ("" if relative == "." else f"/{relative}")
            if path.is_dir():
                bucket.blob(name + "/").upload_from_string(b"")
                names.append(name + "/")
            else:
                bucket.blob(name).upload_from_filename(str(path))
                names.append(name)
    bucket.blob(f"{PREFIX}/extractor/1/assets/").upload_from_string(b"")
    bucket.blob(f"{PREFIX}/extractor/{NESTED}").upload_from_string(b"nested\n")
    assert f"{PREFIX}/extractor/" in names
    return names


def test_assemble_downloads_from_the_json_api_with_folder_objects_and_nested_names(
    uploaded: list[str], tmp_path: Path
) -> None:
    init, artifacts = rendered_init(fanout_from({"uri": f"gs://{BUCKET}/{PREFIX}"}), tmp_path / "generated")
    out = tmp_path / "models" / "repository"
    assemble(tmp_path / "generated", source_arg(init), out)
    assert_assembled(out, artifacts)


def test_a_missing_bucket_is_one_clear_problem(emulator: str, tmp_path: Path) -> None:
    init, _ = rendered_init(fanout_from({"uri": "gs://no-such-bucket/triton"}), tmp_path / "generated")
    with pytest.raises(SpecError) as err:
        assemble(tmp_path / "generated", source_arg(init), tmp_path / "out" / "repository")
    (problem,) = err.value.problems
    assert problem.path == "spec.modelRepository.uri"
    assert "gs://no-such-bucket/triton" in problem.message and "404" in problem.message
    assert os.linesep not in problem.message
