"""The init container's s3:// download against a real S3-compatible server (MinIO built from Go modules,
TLS from a test CA, a region of its own) on loopback, configured exactly as the renderer configures the
pod: the init container's variables from the rendered Deployment, the CA file and the Secret's keys."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import s3server
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
from tritonpipeline.render.manifests import CA_DIR

pytestmark = pytest.mark.minio

BUCKET = "models"
PREFIX = "team/triton"


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    try:
        server = s3server.start(tmp_path_factory.mktemp("minio"))
    except s3server.S3ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def uploaded(minio: Any, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """model_repository/ plus a nested file, with a folder marker object for every directory."""
    tree = tmp_path_factory.mktemp("tree")
    for model in FANOUT_MODELS:
        subprocess.run(["cp", "-r", str(MODELS / model), str(tree / model)], check=True)
    (tree / "extractor" / NESTED).parent.mkdir(parents=True)
    (tree / "extractor" / NESTED).write_text("nested\n")
    keys: list[str] = minio.upload_tree(BUCKET, PREFIX, tree)
    assert any(k.endswith("/") for k in keys)  # folder markers are there to be skipped
    return keys


def pipeline_doc(minio: Any, **s3: Any) -> dict[str, Any]:
    s3 = {"endpoint": minio.endpoint, "region": minio.region, "caSecretRef": {"name": "ca"}, **s3}
    return fanout_from({"uri": f"s3://{BUCKET}/{PREFIX}", "secretRef": {"name": "bucket-creds"}, "s3": s3})


def init_environment(doc: dict[str, Any], minio: Any, generated: Path) -> tuple[dict[str, str], str, Any]:
    """(the init container's variables as the pod would have them, its --source, the artifacts): the
    rendered `env`, the CA file where the rendered mount puts it, and the Secret's keys for envFrom; its
    ConfigMaps written into `generated`."""
    init, artifacts = rendered_init(doc, generated)
    env = {e["name"]: e["value"] for e in init.get("env", [])}
    if "AWS_CA_BUNDLE" in env:
        assert env["AWS_CA_BUNDLE"].startswith(CA_DIR + "/")
        env["AWS_CA_BUNDLE"] = str(minio.ca_file)
    if init.get("envFrom"):
        env |= {"AWS_ACCESS_KEY_ID": minio.access_key, "AWS_SECRET_ACCESS_KEY": minio.secret_key}
    return env, source_arg(init), artifacts


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("AWS_", "TRITONPIPELINE_S3")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def test_assemble_downloads_from_minio_with_folder_markers_nested_keys_endpoint_ca_and_region(
    minio: Any, uploaded: list[str], tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    env, source, artifacts = init_environment(pipeline_doc(minio), minio, tmp_path / "generated")
    assert set(env) >= {"AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_CA_BUNDLE"}
    for name, value in env.items():
        clean_env.setenv(name, value)
    out = tmp_path / "models" / "repository"
    assemble(tmp_path / "generated", source, out)
    assert_assembled(out, artifacts)


def assemble_cli(tmp_path: Path, env: dict[str, str], source: str) -> Any:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TRITONPIPELINE_S3"))}
    base |= {"AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    base |= {"AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1"}
    cmd = [sys.executable, "-m", "tritonpipeline.cli", "assemble", "--generated", str(tmp_path / "generated")]
    cmd += ["--source", source, "--out", str(tmp_path / "out" / "repository")]
    return subprocess.run(cmd, env=base | env, capture_output=True, text=True, timeout=120)


def one_line_error(result: Any, *words: str) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "spec.modelRepository.uri" in lines[0] and f"s3://{BUCKET}/{PREFIX}" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.cli
def test_bad_credentials_are_one_clear_line(minio: Any, uploaded: list[str], tmp_path: Path) -> None:
    doc = pipeline_doc(minio)
    env, source, _ = init_environment(doc, minio, tmp_path / "generated")
    env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    one_line_error(assemble_cli(tmp_path, env, source), "SignatureDoesNotMatch")
    assert not (tmp_path / "out" / "repository").exists()


@pytest.mark.cli
def test_without_the_ca_bundle_tls_fails_clearly(minio: Any, uploaded: list[str], tmp_path: Path) -> None:
    doc = pipeline_doc(minio)
    env, source, _ = init_environment(doc, minio, tmp_path / "generated")
    env.pop("AWS_CA_BUNDLE")
    one_line_error(assemble_cli(tmp_path, env, source), "SSL")


REDIRECT = "but the bucket models is in region"  # botocore's note when it re-signs for the bucket's region


@pytest.mark.parametrize(("region", "redirected"), [(s3server.REGION, False), (None, True)])
def test_requests_are_signed_for_the_rendered_region(
    minio: Any,
    uploaded: list[str],
    tmp_path: Path,
    clean_env: Any,
    caplog: pytest.LogCaptureFixture,
    region: str | None,
    redirected: bool,
) -> None:
    """MinIO refuses a request signed for another region and botocore then retries with the region of
    the error: the rendered AWS_REGION is what avoids that round trip (without it, it happens)."""
    doc = pipeline_doc(minio)
    if region is None:
        del doc["spec"]["modelRepository"]["s3"]["region"]
    env, source, _ = init_environment(doc, minio, tmp_path / "generated")
    assert env.get("AWS_REGION") == region
    for name, value in env.items():
        clean_env.setenv(name, value)
    with caplog.at_level("DEBUG", logger="botocore.utils"):
        assemble(tmp_path / "generated", source, tmp_path / "out" / "repository")
    assert (REDIRECT in caplog.text) is redirected, caplog.text[-2000:]


def test_a_model_missing_from_the_bucket_is_named(
    minio: Any, uploaded: list[str], tmp_path: Path, clean_env: Any
) -> None:
    doc = pipeline_doc(minio)
    doc["spec"]["modelRepository"]["uri"] = f"s3://{BUCKET}/elsewhere"
    env, source, _ = init_environment(doc, minio, tmp_path / "generated")
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(SpecError, match=r"model directory 'extractor' not found in the source 's3://models/"):
        assemble(tmp_path / "generated", source, tmp_path / "out" / "repository")
