"""Container images for `make e2e` (kind), built here with no registry, cached by content.

    python base      a Debian bookworm rootfs (debootstrap minbase + Python 3.11, numpy, ca-certificates,
                     curl) packed as an OCI image: the PYTHON_IMAGE the Dockerfile is built on
    operator         the repository's Dockerfile, built by Debian's buildah on that base (so the
                     Dockerfile itself is proven), exported as an OCI archive under the chart's image name
    assembler        the Dockerfile's target `assembler` (the Triton pods' init container), built the
                     same way, under the name the chart gives it (the operator's repository + -assembler)
    tritonserver-cpu the same rootfs plus the nvidia-pytriton wheel's tritonserver laid out like NVIDIA's
                     image (/opt/tritonserver/{bin,lib,backends}, `tritonserver` on PATH), user 1000

Every image is an OCI archive under <cache>/images/ named after the hash of what it is made of; a second
run only finds it. `kind load image-archive` loads an archive into the nodes' containerd.

    python -m e2e.images           build (or find) all four, print their names, archives and sizes
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.controlplane_binaries import cache_dir
from harness.helm import CHART
from harness.paths import ROOT
from tritonpipeline.settings import ASSEMBLER_SUFFIX  # the chart's default assembler: the operator's + it

SUITE = "bookworm"
# python3.11-venv, python3-pip, python-is-python3: the Dockerfile runs `python -m pip` and `python -m venv`;
# libpython3.11: the Python backend's stub links it
DEBIAN_PACKAGES = (
    "python3.11",
    "libpython3.11",
    "python3.11-venv",
    "python3-pip",
    "python-is-python3",
    "python3-numpy",
    "ca-certificates",
    "curl",
)
BASE_IMAGE = "tritonpipeline.local/python:3.11-bookworm"
TRITON_IMAGE_REPO = "tritonpipeline.local/tritonserver-cpu"
TRITON_HOME = "/opt/tritonserver"
# the uid/gid the operator's pods run as (restricted Pod Security; NVIDIA's triton-server user)
TRITON_UID = 1000
# bump when the way an image is made changes (the cache keys include it)
RECIPE = 1
# host files the Dockerfile's pip steps need to reach the package index through this host's
# TLS-intercepting proxy: bind-mounted into RUN steps, never copied into the image
HOST_PIP_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf")
# buildah (containers/image) keeps its blob-info cache there as root whatever --root says: removed after
# a build when the build created it
BUILDAH_HOST_DIRS = ("/var/lib/containers",)
KEEP_OPERATOR_ARCHIVES = 3
# the Dockerfile's targets: (the image's role, `buildah bud --target`; None: the last stage, the default)
DOCKERFILE_TARGETS = {"operator": None, "assembler": "assembler"}


class ImageError(RuntimeError):
    """An image could not be built."""


def log(msg: str) -> None:
    print(f">> images: {msg}", flush=True)


def images_dir() -> Path:
    """<cache>/images, next to the control plane's and the node's directories."""
    return cache_dir().parent.parent / "images"


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([RECIPE, *parts], sort_keys=True, default=str).encode()).hexdigest()[:12]


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    if proc.returncode != 0:
        raise ImageError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


# ---------------------------------------------------------------------------------------------------
# OCI archives


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _gzip_layer(layer: Path, blobs: Path) -> tuple[str, str, int]:
    """Compress an uncompressed layer tar into blobs/; (diff_id, digest, size)."""
    raw, packed = hashlib.sha256(), hashlib.sha256()
    tmp = blobs / "layer.tmp"
    with (
        layer.open("rb") as src,
        tmp.open("wb") as dst,
        gzip.GzipFile(fileobj=dst, mode="wb", compresslevel=3, mtime=0) as gz,
    ):
        while chunk := src.read(1 << 20):
            raw.update(chunk)
            gz.write(chunk)
    with tmp.open("rb") as f:
        while chunk := f.read(1 << 20):
            packed.update(chunk)
    tmp.rename(blobs / packed.hexdigest())
    return (
        f"sha256:{raw.hexdigest()}",
        f"sha256:{packed.hexdigest()}",
        (blobs / packed.hexdigest()).stat().st_size,
    )


def write_oci_archive(name: str, layers: list[Path], config: dict[str, Any], out: Path, history: str) -> Path:
    """Write an OCI image archive (oci-layout, index.json, blobs/sha256/...) named `name` from
    uncompressed layer tars (bottom first) and an image `config` (Entrypoint, Env, User, ...)."""
    with tempfile.TemporaryDirectory(dir=out.parent) as tmpdir:
        blobs = Path(tmpdir) / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        described = [_gzip_layer(layer, blobs) for layer in layers]
        image_config = json.dumps(
            {
                "architecture": _arch(),
                "os": "linux",
                "config": config,
                "rootfs": {"type": "layers", "diff_ids": [d for d, _, _ in described]},
                "history": [{"created_by": history}],
            },
            sort_keys=True,
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": _sha(image_config),
                    "size": len(image_config),
                },
                "layers": [
                    {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": dg, "size": size}
                    for _, dg, size in described
                ],
            },
            sort_keys=True,
        ).encode()
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": _sha(manifest),
                        "size": len(manifest),
                        "platform": {"architecture": _arch(), "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                        },
                    }
                ],
            }
        ).encode()
        for blob in (image_config, manifest):
            (blobs / hashlib.sha256(blob).hexdigest()).write_bytes(blob)
        top = Path(tmpdir)
        (top / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        (top / "index.json").write_bytes(index)
        tmp = out.with_suffix(".tmp")
        with tarfile.open(tmp, "w") as tar:
            for entry in ("oci-layout", "index.json", "blobs"):
                tar.add(top / entry, arcname=entry)
        tmp.rename(out)
    return out


def _dir_layer(src: Path, out: Path, *, exclude: tuple[str, ...] = ()) -> Path:
    """An uncompressed layer tar of directory `src` (numeric owners, sorted, GNU tar)."""
    cmd = ["tar", "-C", str(src), "--numeric-owner", "--sort=name", "-cf", str(out)]
    cmd += [f"--exclude=./{pattern}" for pattern in exclude]
    _run([*cmd, "."])
    return out


@dataclass(frozen=True)
class Image:
    name: str
    archive: Path

    @property
    def size_mb(self) -> float:
        return self.archive.stat().st_size / 1e6

    def unpacked_mb(self) -> float:
        """The sum of the uncompressed layers (the image's size on a node's disk)."""
        with tarfile.open(self.archive) as tar:
            index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
            manifest = json.load(tar.extractfile("blobs/sha256/" + index["manifests"][0]["digest"][7:]))  # type: ignore[arg-type]
            total = 0
            for layer in manifest["layers"]:
                with gzip.open(tar.extractfile("blobs/sha256/" + layer["digest"][7:])) as gz:  # type: ignore[arg-type]
                    while chunk := gz.read(1 << 20):
                        total += len(chunk)
        return total / 1e6


# ---------------------------------------------------------------------------------------------------
# the Debian rootfs


def apt_mirror(suite: str = SUITE, apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt on this host uses for `suite` (deb822 .sources or one-line lists), read at
    run time so no mirror is written anywhere."""
    parts = apt_dir / "sources.list.d"
    for path in sorted(parts.glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            lines = [ln for ln in stanza.splitlines() if ln.strip() and not ln.startswith("#")]
            fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
            if suite in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split():
                return fields["URIs"].split()[0]
    for path in [apt_dir / "sources.list", *sorted(parts.glob("*.list"))]:
        for line in path.read_text().splitlines() if path.exists() else []:
            words = [w for w in line.split() if not w.startswith("[")]  # options: [arch=amd64 ...]
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    raise ImageError(f"no Debian mirror for {suite} in apt's sources ({apt_dir}/sources.list[.d])")


# what a rootfs layer leaves out: the kernel's and the runtime's mount points stay empty
ROOTFS_EXCLUDE = ("dev/*", "proc/*", "sys/*", "run/*", "tmp/*")


def debootstrap(target: Path, packages: tuple[str, ...]) -> None:
    """Debian SUITE (minbase + `packages`) from the mirror apt uses here into `target`, apt's caches
    emptied (about a minute for a few packages)."""
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        raise ImageError("debootstrap is not installed (apt-get install debootstrap)")
    log(f"debootstrap {SUITE} minbase + {', '.join(packages)} (a minute or two)")
    t = time.monotonic()
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(target)]
    proc = subprocess.run([*cmd, apt_mirror()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise ImageError(f"debootstrap failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    log(f"debootstrap done in {time.monotonic() - t:.0f}s")
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (target / junk).glob("*"):
            if entry.is_file():
                entry.unlink()


def rootfs_layer(packages: tuple[str, ...] = DEBIAN_PACKAGES, label: str = "rootfs") -> Path:
    """A debootstrap rootfs with `packages` as an uncompressed layer tar, built once per package set."""
    out = images_dir() / f"{label}-{SUITE}-{_key(SUITE, packages)}.tar"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        target = Path(tmp) / "rootfs"
        debootstrap(target, packages)
        _dir_layer(target, out.with_suffix(".part"), exclude=ROOTFS_EXCLUDE)
        out.with_suffix(".part").rename(out)
    return out


def base_image() -> Image:
    """The local Python base image: the rootfs, python3 as its command."""
    layer = rootfs_layer()
    archive = images_dir() / f"python-base-{_key(layer.name)}.oci.tar"
    if not archive.exists():
        log(f"packing {BASE_IMAGE}")
        config = {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["python3"],
        }
        write_oci_archive(BASE_IMAGE, [layer], config, archive, f"debootstrap {SUITE} minbase")
    return Image(BASE_IMAGE, archive)


# ---------------------------------------------------------------------------------------------------
# the CPU Triton runtime image


def _stage_triton(stage: Path) -> str:
    """/opt/tritonserver from the wheel (bench/gpu/pack.py's layout), the Python 3.11 stub in
    backends/python, a `tritonserver` wrapper on PATH, and the user TRITON_UID. Returns the version."""
    from importlib import metadata

    from bench.gpu.pack import stage_tritonserver

    opt = stage / "opt"
    opt.mkdir(parents=True)
    stage_tritonserver(opt, {"3.11"})
    home = opt / "tritonserver"
    stub = home / "python_backend_stubs" / "3.11" / "triton_python_backend_stub"
    shutil.move(stub, home / "backends" / "python" / "triton_python_backend_stub")
    shutil.rmtree(home / "python_backend_stubs")
    wrapper = stage / "usr" / "local" / "bin" / "tritonserver"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(
        "#!/bin/sh\n# the wheel's RPATH does not fit NVIDIA's layout: its libraries are in lib/\n"
        f'export LD_LIBRARY_PATH="{TRITON_HOME}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n'
        f'exec {TRITON_HOME}/bin/tritonserver "$@"\n'
    )
    wrapper.chmod(0o755)
    return metadata.version("nvidia-pytriton")


def _user_files(rootfs_tar: Path, stage: Path) -> None:
    """/etc/passwd and /etc/group of the rootfs with the triton-server user (uid/gid TRITON_UID)."""
    with tarfile.open(rootfs_tar) as tar:
        for name, line in (
            ("passwd", f"triton-server:x:{TRITON_UID}:{TRITON_UID}::/home/triton-server:/bin/sh\n"),
            ("group", f"triton-server:x:{TRITON_UID}:\n"),
        ):
            text = tar.extractfile(f"./etc/{name}").read().decode()  # type: ignore[union-attr]
            (stage / "etc").mkdir(exist_ok=True)
            (stage / "etc" / name).write_text(text + line)
    home = stage / "home" / "triton-server"
    home.mkdir(parents=True)
    os.chown(home, TRITON_UID, TRITON_UID)


def triton_image() -> Image:
    """The CPU Triton runtime image: rootfs + /opt/tritonserver, user 1000, `tritonserver` on PATH."""
    from importlib import metadata

    version = metadata.version("nvidia-pytriton")
    layer = rootfs_layer()
    pack_src = (ROOT / "bench" / "gpu" / "pack.py").read_bytes()
    key = _key(layer.name, version, hashlib.sha256(pack_src).hexdigest())
    name = f"{TRITON_IMAGE_REPO}:{version}"
    archive = images_dir() / f"tritonserver-cpu-{key}.oci.tar"
    if archive.exists():
        return Image(name, archive)
    log(f"packing {name}: the nvidia-pytriton {version} tritonserver in {TRITON_HOME}")
    with tempfile.TemporaryDirectory(dir=images_dir()) as tmp:
        stage = Path(tmp) / "stage"
        _stage_triton(stage)
        _user_files(layer, stage)
        top = _dir_layer(stage, Path(tmp) / "triton.tar")
        config = {
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/home/triton-server",
            ],
            "User": f"{TRITON_UID}:{TRITON_UID}",
            "WorkingDir": "/home/triton-server",
            "Entrypoint": ["tritonserver"],
            "ExposedPorts": {"8000/tcp": {}, "8001/tcp": {}, "8002/tcp": {}},
        }
        write_oci_archive(name, [layer, top], config, archive, f"e2e/images.py triton_image {version}")
    return Image(name, archive)


# ---------------------------------------------------------------------------------------------------
# the operator and assembler images: the repository's Dockerfile, built by buildah


def chart_image() -> str:
    """The operator image name the chart renders by default: image.repository:appVersion."""
    values = (CHART / "values.yaml").read_text()
    chart = (CHART / "Chart.yaml").read_text()
    repo = next(
        ln.split(":", 1)[1].strip() for ln in values.splitlines() if ln.strip().startswith("repository:")
    )
    version = next(
        ln.split(":", 1)[1].strip().strip("\"'") for ln in chart.splitlines() if ln.startswith("appVersion:")
    )
    return f"{repo}:{version}"


def chart_assembler_image() -> str:
    """The init container image the chart renders by default: image.repository-assembler:appVersion."""
    return assembler_of(chart_image())


def assembler_of(operator: str) -> str:
    """The assembler image the chart names after an operator image REPOSITORY:TAG (its default)."""
    repository, _, tag = operator.rpartition(":")
    return f"{repository}{ASSEMBLER_SUFFIX}:{tag}"


def _context_files() -> list[Path]:
    """What the Dockerfile COPYs (pyproject.toml, README.md, operator/, the lock files) and the Dockerfile;
    not what .dockerignore leaves out of the context (bytecode, the egg-info that `pip install -e` and
    `python -m build` rewrite, which would otherwise make every image new after a build)."""
    files = [ROOT / "Dockerfile", ROOT / "pyproject.toml", ROOT / "README.md"]
    files += sorted((ROOT / "requirements").glob("*.lock"))
    files += sorted(
        p
        for p in (ROOT / "operator").rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not p.name.endswith(".pyc")
        and not any(part.endswith(".egg-info") for part in p.parts)
    )
    return files


def _buildah_env(work: Path) -> dict[str, str]:
    """containers.conf of our own: runc (crun refuses this host's cgroup layout) and open-file limits
    within the hard RLIMIT_NOFILE (the default asks for more and every RUN step fails)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = hard if hard != resource.RLIM_INFINITY else 1048576
    conf = work / "containers.conf"
    conf.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={limit}:{limit}"]\n\n[engine]\nruntime = "runc"\n'
    )
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def _stream(cmd: list[str], env: dict[str, str], what: str) -> None:
    """Run `cmd`, printing its STEP lines as progress; its whole output when it fails."""
    lines: list[str] = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "STEP " in line[:16]:  # "STEP 1/9: ..." or, multi-stage, "[1/2] STEP 1/4: ..."
                log(f"  {line.rstrip()[:150]}")
    if proc.returncode != 0:
        raise ImageError(f"{what} failed ({proc.returncode}):\n{''.join(lines)[-4000:]}")


def operator_image(base: Image | None = None) -> Image:
    """The repository's Dockerfile built with buildah on the local Python base, as an OCI archive named
    like the chart's image. Cached by the Dockerfile, the build context and the base image."""
    return _dockerfile_image("operator", chart_image(), base)


def assembler_image(base: Image | None = None) -> Image:
    """The Dockerfile's target `assembler`, the same way, named as the chart names it by default."""
    return _dockerfile_image("assembler", chart_assembler_image(), base)


def _dockerfile_image(role: str, name: str, base: Image | None) -> Image:
    """A target of the repository's Dockerfile (DOCKERFILE_TARGETS[role]) built with buildah, as an OCI
    archive named `name`, cached by the Dockerfile, the build context, the target and the base image."""
    if shutil.which("buildah") is None:
        raise ImageError("buildah is not installed (apt-get install buildah)")
    base = base or base_image()
    digest = hashlib.sha256()
    for path in _context_files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    target = DOCKERFILE_TARGETS[role]
    key = _key(name, base.archive.name, digest.hexdigest(), *([target] if target else []))
    archive = images_dir() / f"{role}-{key}.oci.tar"
    if archive.exists():
        return Image(name, archive)
    images_dir().mkdir(parents=True, exist_ok=True)
    # one build at a time: the buildah storage is shared, and a build ends with `rmi --all`
    with (images_dir() / "buildah.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():  # built by another process while this one waited
            return Image(name, archive)
        absent = [d for d in BUILDAH_HOST_DIRS if not os.path.lexists(d)]
        try:
            _buildah_build(name, base, archive, target)
        finally:
            for d in absent:
                shutil.rmtree(d, ignore_errors=True)
    _keep_newest(f"{role}-*.oci.tar", KEEP_OPERATOR_ARCHIVES)
    return Image(name, archive)


def _keep_newest(pattern: str, keep: int) -> None:
    """Remove all but the `keep` newest cached archives matching `pattern` (each source change of the
    operator makes a new one; several worktrees may use different ones)."""
    found = sorted(images_dir().glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in found[keep:]:
        log(f"removing the old cached {old.name}")
        old.unlink(missing_ok=True)


def _buildah_build(name: str, base: Image, archive: Path, target: str | None = None) -> None:
    """buildah bud of the Dockerfile (its `target` stage, else the last) with a storage of its own under the
    cache, then `push` to `archive`."""
    work = images_dir() / "buildah"
    work.mkdir(parents=True, exist_ok=True)
    store = ["--root", str(work / "storage"), "--runroot", str(work / "run")]
    env = _buildah_env(work)
    t = time.monotonic()
    log(f"buildah: loading {base.name}")
    image_id = _run(
        ["buildah", *store, "pull", "--quiet", f"oci-archive:{base.archive}"], env=env
    ).stdout.strip()
    _run(["buildah", *store, "tag", image_id, base.name], env=env)
    mounts = [f"--volume={p}:{p}:ro" for p in HOST_PIP_FILES if Path(p).exists()]
    log(f"buildah bud {ROOT / 'Dockerfile'} -> {name} (about a minute; pip through the host's CA bundle)")
    cmd = ["buildah", *store, "bud", "--pull-never", "--network=host", "--layers=false"]
    cmd += [f"--target={target}"] if target else []
    cmd += [
        f"--build-arg=PYTHON_IMAGE={base.name}",
        *mounts,
        "-t",
        name,
        "-f",
        str(ROOT / "Dockerfile"),
        str(ROOT),
    ]
    _stream(cmd, env, "buildah bud")
    log(f"built in {time.monotonic() - t:.0f}s; exporting the OCI archive")
    tmp = archive.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    _run(["buildah", *store, "push", "--quiet", name, f"oci-archive:{tmp}:{name}"], env=env)
    _run(["buildah", *store, "rmi", "--all", "--force"], env=env)
    tmp.rename(archive)


def all_images() -> dict[str, Image]:
    base = base_image()
    return {"operator": operator_image(base), "assembler": assembler_image(base), "triton": triton_image()}


def main() -> int:
    t = time.monotonic()
    try:
        images = {"base": base_image(), **all_images()}
    except ImageError as err:
        print(f"images: {err}", file=sys.stderr)
        return 1
    for role, image in images.items():
        print(
            f"{role:9} {image.name:45} {image.size_mb:6.1f} MB archive, "
            f"{image.unpacked_mb():6.1f} MB unpacked  {image.archive}"
        )
    print(f"({time.monotonic() - t:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
