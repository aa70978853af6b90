"""`make release` (e2e/release.py): the version rule, the re-tagged OCI archives, the chart's values with the
images by digest, SHA256SUMS; and, marked `release_build`, a whole release on real parts (the images built by
buildah, syft, helm, python -m build) checked the way a user would use it.
Here the pure tests; those on real components are in tests/component/test_release.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from e2e import release
from harness.helm import CHART
from support.release import _members

DIGEST_A = "sha256:" + "a" * 64


DIGEST_B = "sha256:" + "b" * 64


# ------------------------------------------------------------------------------------- the version rule


def test_a_version_other_than_pyproject_s_is_refused_in_one_line_before_anything_is_built(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    have = release.tree_version()
    assert release.check_version(have) == have
    for asked, says in (
        ("9.9.9", f"VERSION 9.9.9 is not this tree's version {have}: set version"),
        ("", f"make release needs VERSION=X.Y.Z (this tree's version, pyproject.toml's, is {have})"),
        ("1.2", "is not X.Y.Z"),
        ("1.2.3rc1", "is not X.Y.Z"),
        ("01.2.3", "is not X.Y.Z"),
    ):
        assert release.main([asked] if asked else []) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and says in err, err
    other = tmp_path / "other"
    other.mkdir()
    (other / "images.json").write_text(json.dumps({"version": "9.9.9", "images": {}}))
    publish = [
        "publish",
        str(other),
        "--chart-repo",
        "oci://registry.example/charts",
        "--out",
        str(tmp_path / "o"),
    ]
    assert release.main(publish) == 2 and not (tmp_path / "o").exists()
    assert "is not this tree's version" in capsys.readouterr().err


def test_the_tree_version_is_the_chart_s_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert release.tree_version() == str(chart["appVersion"])
    assert set(release.version_mentions().values()) == {release.tree_version()}


def test_a_place_that_names_another_version_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    have = release.tree_version()
    monkeypatch.setattr(
        release, "version_mentions", lambda: {"Chart.yaml appVersion": "0.0.1", "settings": have}
    )
    with pytest.raises(
        release.ReleaseError, match=f"pyproject.toml says {have} but not Chart.yaml appVersion:"
    ):
        release.check_version(have)


# ------------------------------------------------------------------------------------- the images


def _archive(tmp_path: Path) -> Path:
    from e2e.images import write_oci_archive

    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return write_oci_archive("example.local/op:old", [layer], {"User": "1"}, tmp_path / "in.oci.tar", "t")


def test_export_retags_in_index_json_only_so_the_manifest_digest_is_the_built_one(tmp_path: Path) -> None:
    built = _archive(tmp_path)
    entry = release.export_image(built, "registry.example/ml/op", "1.2.3", tmp_path / "out.oci.tar")
    before, after = _members(built), _members(tmp_path / "out.oci.tar")
    assert {k: v for k, v in before.items() if k != "index.json"} == {
        k: v for k, v in after.items() if k != "index.json"
    }
    (old,) = json.loads(before["index.json"])["manifests"]
    (desc,) = json.loads(after["index.json"])["manifests"]
    manifest = after[f"blobs/sha256/{desc['digest'][7:]}"]
    assert desc["digest"] == old["digest"] == "sha256:" + hashlib.sha256(manifest).hexdigest()
    assert desc["size"] == len(manifest)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    assert desc["platform"] == {"architecture": arch, "os": "linux"}
    assert desc["annotations"] == {
        "io.containerd.image.name": "registry.example/ml/op:1.2.3",
        "org.opencontainers.image.ref.name": "1.2.3",
    }
    assert entry == {
        "repository": "registry.example/ml/op",
        "tag": "1.2.3",
        "digest": desc["digest"],
        "reference": f"registry.example/ml/op@{desc['digest']}",
        "platform": f"linux/{arch}",
        "archive": "out.oci.tar",
    }


def test_why_a_platform_is_not_built_says_what_the_host_lacks(tmp_path: Path) -> None:
    unmounted = tmp_path / "empty"
    unmounted.mkdir()
    assert "binfmt_misc is not mounted" in release.why_not_built("linux/arm64", unmounted)
    mounted = tmp_path / "binfmt"
    mounted.mkdir()
    (mounted / "register").write_text("")
    assert "no qemu-aarch64 handler is registered" in release.why_not_built("linux/arm64", mounted)
    (mounted / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    registered = release.why_not_built("linux/arm64", mounted)
    assert "qemu-aarch64 is registered" in registered and "arm64 runner" in registered


def test_the_images_cache_key_ignores_what_a_build_writes_into_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """e2e/images.py keys an image by the files the Dockerfile copies, less what .dockerignore leaves out:
    the egg-info `pip install -e` writes is no part of it, so a release (or `make venv`) does not make the
    next run build the images again."""
    from e2e import images

    for name in ("Dockerfile", "pyproject.toml", "README.md", "requirements/operator.lock",
                 "operator/tritonpipeline/cli.py", "operator/tritonpipeline.egg-info/SOURCES.txt",
                 "operator/tritonpipeline/__pycache__/cli.cpython-311.pyc"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    monkeypatch.setattr(images, "ROOT", tmp_path)
    kept = {p.relative_to(tmp_path).as_posix() for p in images._context_files()}
    assert kept == {"Dockerfile", "pyproject.toml", "README.md", "requirements/operator.lock",
                    "operator/tritonpipeline/cli.py"}  # fmt: skip


# ------------------------------------------------------------------------------------- the chart, the sums


def test_the_packaged_values_differ_from_the_tree_s_in_the_image_lines_alone() -> None:
    text = (CHART / "values.yaml").read_text()
    new = release.set_chart_images(
        text, "registry.example/ml/op", DIGEST_A, f"registry.example/ml/op-assembler@{DIGEST_B}"
    )
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines(), strict=True) if a != b]
    assert [b.split(":", 1)[0] for _, b in changed] == ["  repository", "  digest", "assemblerImage"]
    values = yaml.safe_load(new)
    assert values["image"]["repository"] == "registry.example/ml/op"
    assert values["image"]["digest"] == DIGEST_A
    assert values["assemblerImage"] == f"registry.example/ml/op-assembler@{DIGEST_B}"
    with pytest.raises(release.ReleaseError, match="expected one line each of digest"):
        release.set_chart_images(text.replace("  digest:", "  # digest:"), "r", DIGEST_A, "a")


def test_the_packaged_chart_lists_its_images_by_digest_for_artifact_hub() -> None:
    """`make release` keeps Chart.yaml's artifacthub.io/images in step with the defaults it sets: the
    image lines of that annotation change, nothing else of Chart.yaml."""
    assembler = f"registry.example/ml/op-assembler@{DIGEST_B}"
    values = release.set_chart_images(
        (CHART / "values.yaml").read_text(), "registry.example/ml/op", DIGEST_A, assembler
    )
    text = (CHART / "Chart.yaml").read_text()
    new = release.set_chart_image_annotation(text, values)
    listed = yaml.safe_load(yaml.safe_load(new)["annotations"]["artifacthub.io/images"])
    assert listed == [
        {"name": "operator", "image": f"registry.example/ml/op@{DIGEST_A}"},
        {"name": "assembler", "image": assembler},
    ]
    changed = [b for a, b in zip(text.splitlines(), new.splitlines(), strict=True) if a != b]
    assert [line.split(":", 1)[0] for line in changed] == ["      image", "      image"]


def test_sha256sums_is_what_sha256sum_checks(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"wheel")
    (tmp_path / "b.tgz").write_bytes(b"chart")
    sums = release.write_sums(tmp_path)
    assert sums.read_text().splitlines()[0] == f"{hashlib.sha256(b'wheel').hexdigest()}  a.whl"
    ok = subprocess.run(["sha256sum", "-c", sums.name], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.count(": OK") == 2, ok.stdout
    (tmp_path / "b.tgz").write_bytes(b"changed")
    assert subprocess.run(
        ["sha256sum", "-c", "--quiet", sums.name], cwd=tmp_path, capture_output=True
    ).returncode
