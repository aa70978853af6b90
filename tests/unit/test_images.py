"""The images of `make e2e` (e2e/images.py): an OCI archive is a valid image layout whose every digest and
size matches its content (containerd refuses anything else); the Debian mirror comes from apt's own
configuration."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    algo, hexdigest = digest.split(":")
    assert algo == "sha256"
    f = tar.extractfile(f"blobs/sha256/{hexdigest}")
    assert f is not None, digest
    data = f.read()
    assert hashlib.sha256(data).hexdigest() == hexdigest
    return data


def test_images_layers_stack_in_order_and_every_digest_matches(tmp_path: Path) -> None:
    """e2e/images.py write_oci_archive: several layers (the Triton image is the rootfs plus its tree)."""
    from e2e.images import write_oci_archive

    layers = []
    for i, content in enumerate((b"bottom", b"top layer")):
        layer = tmp_path / f"l{i}.tar"
        with tarfile.open(layer, "w") as tar:
            info = tarfile.TarInfo(f"f{i}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        layers.append(layer)
    config = {"User": "1000:1000", "Entrypoint": ["tritonserver"]}
    archive = write_oci_archive("example.local/t:2", layers, config, tmp_path / "t.oci.tar", "test")
    with tarfile.open(archive) as tar:
        (desc,) = json.loads(tar.extractfile("index.json").read())["manifests"]  # type: ignore[union-attr]
        assert desc["annotations"]["io.containerd.image.name"] == "example.local/t:2"
        manifest_bytes = _blob(tar, desc["digest"])
        assert len(manifest_bytes) == desc["size"]
        manifest = json.loads(manifest_bytes)
        image_config = json.loads(_blob(tar, manifest["config"]["digest"]))
        unpacked = []
        for entry in manifest["layers"]:
            data = _blob(tar, entry["digest"])
            assert len(data) == entry["size"]
            unpacked.append(gzip.decompress(data))
    assert unpacked == [layer.read_bytes() for layer in layers]
    assert image_config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(u).hexdigest() for u in unpacked]
    assert image_config["config"] == config


def test_apt_mirror_is_read_from_apts_own_sources(tmp_path: Path) -> None:
    from e2e.images import ImageError, apt_mirror

    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/security\nSuites: bookworm-security\nComponents: main\n\n"
        "# comment\nTypes: deb deb-src\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
    )
    assert apt_mirror("bookworm", apt) == "http://mirror.example/debian"
    one_line = tmp_path / "one"
    (one_line / "sources.list.d").mkdir(parents=True)
    (one_line / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert apt_mirror("bookworm", one_line) == "http://other.example/debian"
    try:
        apt_mirror("trixie", one_line)
    except ImageError as err:
        assert "no Debian mirror for trixie" in str(err)
    else:
        raise AssertionError("no error for a suite apt does not know")


def test_the_dockerfile_images_are_named_as_the_chart_names_them() -> None:
    """e2e/images.py builds the operator image and the Dockerfile's target `assembler` under the names the
    chart renders by default (image.repository:appVersion, the same repository with -assembler), which
    are the operator's defaults too, so `kind load` puts on the nodes what the pods ask for; the lock
    files the images install are part of what a cached archive was built from."""
    from e2e.images import (
        DOCKERFILE_TARGETS,
        _context_files,
        assembler_of,
        chart_assembler_image,
        chart_image,
    )
    from harness.paths import ROOT
    from tritonpipeline.settings import DEFAULT_ASSEMBLER_IMAGE

    assert chart_assembler_image() == DEFAULT_ASSEMBLER_IMAGE == assembler_of(chart_image())
    assert (
        assembler_of("registry.example.com:5000/ml/tp:e2e") == "registry.example.com:5000/ml/tp-assembler:e2e"
    )
    assert DOCKERFILE_TARGETS == {"operator": None, "assembler": "assembler"}
    stages = [
        ln.split(" AS ")[-1] for ln in (ROOT / "Dockerfile").read_text().splitlines() if ln.startswith("FROM")
    ]
    assert stages[-1] == "operator" and "assembler" in stages  # the default target, and the named one
    files = {p.relative_to(ROOT).as_posix() for p in _context_files()}
    assert {"requirements/operator.lock", "requirements/assembler.lock", "Dockerfile"} <= files
