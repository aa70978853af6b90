"""The node test bed's OCI image packer (e2e/node.py pack_image): the archive is a valid OCI image
layout whose every digest and size matches its content (containerd refuses anything else)."""

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


def test_packed_archive_is_a_consistent_oci_layout(tmp_path: Path) -> None:
    from e2e.node import pack_image

    program = tmp_path / "srv"
    program.write_bytes(b"\x7fELF not really a program" * 100)
    archive = pack_image("example.local/srv:7", program, tmp_path / "srv.oci.tar", port=8080)

    with tarfile.open(archive) as tar:
        layout = json.loads(tar.extractfile("oci-layout").read())  # type: ignore[union-attr]
        assert layout == {"imageLayoutVersion": "1.0.0"}
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        (desc,) = index["manifests"]
        assert desc["annotations"]["io.containerd.image.name"] == "example.local/srv:7"
        manifest_bytes = _blob(tar, desc["digest"])
        assert len(manifest_bytes) == desc["size"]
        manifest = json.loads(manifest_bytes)
        config_bytes = _blob(tar, manifest["config"]["digest"])
        assert len(config_bytes) == manifest["config"]["size"]
        config = json.loads(config_bytes)
        (layer_desc,) = manifest["layers"]
        layer_gz = _blob(tar, layer_desc["digest"])
        assert len(layer_gz) == layer_desc["size"]

    layer = gzip.decompress(layer_gz)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/bin/srv"]
    assert "8080/tcp" in config["config"]["ExposedPorts"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as rootfs:
        member = rootfs.getmember("bin/srv")
        assert member.mode == 0o755
        assert rootfs.extractfile(member).read() == program.read_bytes()  # type: ignore[union-attr]
        assert rootfs.getmember("tmp").mode == 0o1777


def test_packing_is_reproducible(tmp_path: Path) -> None:
    from e2e.node import pack_image

    program = tmp_path / "p"
    program.write_bytes(b"same bytes")
    a = pack_image("example.local/p:1", program, tmp_path / "a.tar")
    b = pack_image("example.local/p:1", program, tmp_path / "b.tar")
    with tarfile.open(a) as ta, tarfile.open(b) as tb:
        assert json.loads(ta.extractfile("index.json").read()) == json.loads(
            tb.extractfile("index.json").read()
        )  # type: ignore[union-attr]


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
