"""kind's node image, built here from Go modules and Debian's mirror when the published one cannot be had.

`make e2e` uses kind's published node image (`kindest/node`, kind's default) when the Docker engine can pull
it, and this local one otherwise (`KIND_NODE_IMAGE=local` forces it, `published` forbids the fallback):

    base image   kind's own recipe (images/base of the kind module: its Dockerfile and files): a Debian
                 rootfs (debootstrap from the mirror apt uses here) with systemd, iptables, ... and Debian's
                 runc; containerd, ctr, the runc shim, crictl and the CNI plugins from Go modules
                 (e2e/build-node.sh); kind's entrypoint, systemd units and containerd configuration
    images       every image kubeadm and kind run, preloaded (no registry is ever asked): kube-apiserver,
                 kube-controller-manager, kube-scheduler, kube-proxy, etcd, CoreDNS, pause, kind's
                 local-path-provisioner and its helper, and a placeholder under kindnetd's name (kind's
                 default CNI is not used: e2e/kind.py installs its own), each a static binary from Go
                 modules on an empty layer or, where it runs shell tools (kube-proxy's iptables, the helper's
                 sh), on a small Debian rootfs
    node image   `kind build node-image --type file` from a Kubernetes server tarball laid out like upstream's
                 release (kubeadm, kubelet, kubectl and docker-archive images), on the base image

The binaries are cached by version (e2e/build-node.sh, e2e/build-gotool.sh), the small rootfs under
<cache>/images/; the node image lives in the Docker engine as tritonpipeline.local/kind-node:<k8s>-<key>
(the key: kind's and every component's version, the recipe, the host's needs). The engine e2e/docker_engine.py
starts keeps its data root in the cache, so the image is built once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.images import (
    ROOTFS_EXCLUDE,
    ImageError,
    _dir_layer,
    debootstrap,
    images_dir,
    rootfs_layer,
)
from harness.controlplane_binaries import ensure_binaries
from harness.gotools import ensure_tool, find_go, go_env, tool_path
from tritonpipeline.render.checks import full_reference

HERE = Path(__file__).resolve().parent
BUILD_NODE = HERE / "build-node.sh"
# bump when the way the node image is made changes (part of its cache key)
RECIPE = 1
NODE_IMAGE_REPO = "tritonpipeline.local/kind-node"
BASE_IMAGE_REPO = "tritonpipeline.local/kind-base"
# kind's base image package list (images/base/Dockerfile) without what only rootless or storage add-ons
# use (fuse-overlayfs, nfs-common, open-iscsi), plus Debian's runc (kind builds its own)
BASE_PACKAGES = (
    "systemd",
    "conntrack",
    "iptables",
    "nftables",
    "iproute2",
    "ethtool",
    "util-linux",
    "mount",
    "kmod",
    "libseccomp2",
    "pigz",
    "e2fsprogs",
    "bash",
    "ca-certificates",
    "curl",
    "jq",
    "procps",
    "runc",
)
# the images that run shell tools: kube-proxy (iptables, conntrack) and local-path's helper pod (sh)
TOOLS_PACKAGES = ("iptables", "conntrack", "ca-certificates")
# CNI plugins kind's base image carries (ptp is what e2e/kind.py configures)
CNI_PLUGINS = ("host-local", "loopback", "ptp", "portmap")
CAP_SYS_RESOURCE = 24


def log(msg: str) -> None:
    print(f">> kind image: {msg}", flush=True)


def kind_dir() -> Path:
    return images_dir().parent / "kind"


# ---------------------------------------------------------------------------------------------------
# what the node image is made of


@dataclass(frozen=True)
class KindSource:
    """The kind module's source (its images/base recipe and the image names its node builder expects)."""

    version: str
    root: Path

    @property
    def base_files(self) -> Path:
        return self.root / "images" / "base" / "files"

    def _const(self, relpath: str, name: str) -> str:
        text = (self.root / relpath).read_text()
        found = re.search(rf'^const {name} = "([^"]+)"', text, re.M)
        if not found:
            raise ImageError(f"kind {self.version}: no constant {name} in {relpath}")
        return found.group(1)

    def addon_images(self) -> dict[str, str]:
        """kind's own images a node image preloads: its default CNI and storage (role -> name)."""
        return {
            "kindnetd": self._const("pkg/build/nodeimage/const_cni.go", "kindnetdImage"),
            "local-path-provisioner": self._const(
                "pkg/build/nodeimage/const_storage.go", "storageProvisionerImage"
            ),
            "local-path-helper": self._const("pkg/build/nodeimage/const_storage.go", "storageHelperImage"),
        }

    def sandbox_image(self) -> str:
        """The pause image kind's containerd configuration pins."""
        text = (self.base_files / "etc" / "containerd" / "config.toml").read_text()
        found = re.search(r'^\s*sandbox_image\s*=\s*"([^"]+)"', text, re.M)
        if not found:
            raise ImageError(f"kind {self.version}: no sandbox_image in its containerd config.toml")
        return found.group(1)

    def default_node_image(self) -> str:
        """kind's published node image for this kind release (its default)."""
        return self._const("pkg/apis/config/defaults/image.go", "Image")


def kind_version() -> str:
    return tool_path("kind").parent.name


def kind_source() -> KindSource:
    """Download (or find) the kind module at the pinned version in the shared module cache."""
    version = kind_version()
    go = find_go()
    if go is None:
        raise ImageError(
            "Go is not installed: kind and the node image's components are built from Go modules"
        )
    env = go_env()
    env["GOMODCACHE"] = str(images_dir().parent / "controlplane" / "go-mod")
    env["GOFLAGS"] = "-modcacherw"
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"sigs.k8s.io/kind@{version}"],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise ImageError(f"go mod download sigs.k8s.io/kind@{version} failed:\n{proc.stdout}{proc.stderr}")
    return KindSource(version, Path(json.loads(proc.stdout)["Dir"]))


@dataclass(frozen=True)
class Components:
    """The binaries that go into the node image, all built from Go modules."""

    kubernetes_version: str
    bin: dict[str, Path]
    cni: dict[str, Path]
    versions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeBinaries:
    """What e2e/build-node.sh built: the node components (bin_dir), CNI plugins, their Kubernetes version."""

    bin_dir: Path
    cni_dir: Path
    kubernetes_version: str

    def __getitem__(self, name: str) -> str:
        return str(self.bin_dir / name)


def ensure_node_binaries() -> NodeBinaries:
    """Build (or find cached) the node components with e2e/build-node.sh; its progress goes to stdout."""
    proc = subprocess.run(["bash", str(BUILD_NODE)], env=go_env(), check=False)
    if proc.returncode != 0:
        raise ImageError(f"{BUILD_NODE} failed (exit {proc.returncode})")
    out = subprocess.run(
        ["bash", str(BUILD_NODE), "--print-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = dict(
        line.split("=", 1) for line in (Path(out) / "node.env").read_text().splitlines() if "=" in line
    )
    return NodeBinaries(Path(env["BIN_DIR"]), Path(env["CNI_BIN_DIR"]), env["KUBERNETES_VERSION"])


def build_components() -> Components:
    """Build (or find cached) every binary: e2e/build-node.sh (node components, kubeadm, containerd, crictl,
    CNI, local-path-provisioner), the control plane (etcd, kube-apiserver), CoreDNS and kind."""
    ensure_tool("kind")
    ensure_tool("coredns")
    plane = ensure_binaries()
    node = ensure_node_binaries()
    bin_dir, cni_dir = node.bin_dir, node.cni_dir
    node_env = (bin_dir.parent / "node.env").read_text().splitlines()
    env = dict(line.split("=", 1) for line in node_env if "=" in line)
    names = [
        "kubelet",
        "kubeadm",
        "kubectl",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "crictl",
        "local-path-provisioner",
        "pause",
    ]
    binaries = {name: bin_dir / name for name in names}
    binaries["kube-apiserver"] = Path(plane.kube_apiserver)
    binaries["etcd"] = Path(plane.etcd)
    binaries["coredns"] = tool_path("coredns")
    binaries["kind"] = tool_path("kind")
    versions = {k: v for k, v in env.items() if k.endswith("_VERSION")}
    versions["KIND_VERSION"] = kind_version()
    versions["COREDNS"] = tool_path("coredns").parent.name
    return Components(node.kubernetes_version, binaries, {p: cni_dir / p for p in CNI_PLUGINS}, versions)


def lacks_sys_resource(capbnd: int | None = None) -> bool:
    """Whether this host's capability bounding set lacks CAP_SYS_RESOURCE (a node cannot lower
    oom_score_adj or raise its open-files limit then)."""
    from e2e.docker_engine import capability_bounding_set

    capbnd = capability_bounding_set() if capbnd is None else capbnd
    return not capbnd & (1 << CAP_SYS_RESOURCE)


# ---------------------------------------------------------------------------------------------------
# docker-archive tars (what `docker save` writes and kind's node builder reads the tags of)


@dataclass
class ArchiveImage:
    """One image of a docker archive: its names, uncompressed layer tars (bottom first) and config."""

    names: list[str]
    layers: list[Path]
    config: dict[str, Any]


def _file_layer(out: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    """An uncompressed layer tar of `files` (path -> (content, mode)) and the directories they need."""
    dirs = (("etc", 0o755), ("tmp", 0o1777), ("usr", 0o755), ("usr/local", 0o755), ("usr/local/bin", 0o755))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d, mode in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    out.write_bytes(buf.getvalue())
    return out


def _digest_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_docker_archive(images: list[ArchiveImage], out: Path) -> Path:
    """A docker-archive tar (`repositories` first, then manifest.json, configs and layers) holding
    `images`; layers shared between images are stored once."""
    tmp = out.with_suffix(".part")
    manifest, repositories, written = [], {}, set()
    with tarfile.open(tmp, "w") as tar:
        entries: list[tuple[str, bytes | Path]] = []
        for image in images:
            digests = [_digest_file(layer) for layer in image.layers]
            config = json.dumps(
                {
                    "architecture": "amd64" if os.uname().machine == "x86_64" else "arm64",
                    "os": "linux",
                    "config": image.config,
                    "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in digests]},
                },
                sort_keys=True,
            ).encode()
            config_name = hashlib.sha256(config).hexdigest() + ".json"
            entries.append((config_name, config))
            for digest, layer in zip(digests, image.layers, strict=True):
                if digest not in written:
                    written.add(digest)
                    entries.append((f"{digest}/layer.tar", layer))
            names = [full_reference(n) for n in image.names]
            manifest.append(
                {"Config": config_name, "RepoTags": names, "Layers": [f"{d}/layer.tar" for d in digests]}
            )
            for name in names:
                repo, _, tag = name.rpartition(":")
                repositories.setdefault(repo, {})[tag] = digests[-1]
        head = [
            ("repositories", json.dumps(repositories).encode()),
            ("manifest.json", json.dumps(manifest).encode()),
        ]
        for name, content in head + entries:
            if isinstance(content, Path):
                tar.add(content, arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    tmp.rename(out)
    return out


# ---------------------------------------------------------------------------------------------------
# the base image (kind's images/base recipe, done with debootstrap and chroot)


def _copy_tree(src: Path, dst: Path, mode: int) -> None:
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            target.chmod(mode)


def _chroot(rootfs: Path, script: str) -> None:
    proc = subprocess.run(
        ["chroot", str(rootfs), "/bin/bash", "-euc", script], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ImageError(f"chroot step failed:\n{script}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def cri_base_spec(default_spec: dict[str, Any]) -> dict[str, Any]:
    """kind's /etc/containerd/cri-base.json from `ctr oci spec`: the product-files hook appended to
    createContainer hooks, the process rlimits removed."""
    spec = json.loads(json.dumps(default_spec))
    hooks = spec.setdefault("hooks", {}).setdefault("createContainer", [])
    hooks.append({"path": "/kind/bin/mount-product-files.sh"})
    spec.get("process", {}).pop("rlimits", None)
    return spec


def base_rootfs(src: KindSource, parts: Components, rootfs: Path, *, host_dropin: bool) -> None:
    """kind's images/base Dockerfile, step by step, into `rootfs`."""
    debootstrap(rootfs, BASE_PACKAGES)
    files = src.base_files
    _copy_tree(files / "usr" / "local" / "bin", rootfs / "usr" / "local" / "bin", 0o755)
    _copy_tree(files / "kind", rootfs / "kind", 0o644)
    _copy_tree(files / "kind" / "bin", rootfs / "kind" / "bin", 0o755)
    _copy_tree(files / "LICENSES", rootfs / "LICENSES", 0o644)
    _copy_tree(files / "etc", rootfs / "etc", 0o644)
    _chroot(
        rootfs,
        """
        chmod 755 /kind /kind/bin
        find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
        rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/*
        rm -f /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev*
        rm -f /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
        echo ReadKMsg=no >> /etc/systemd/journald.conf
        ln -sf /usr/lib/systemd/systemd /sbin/init
        systemctl enable kubelet.service containerd.service undo-mount-hacks.service
        systemctl mask systemd-binfmt.service
        mkdir -p /etc/kubernetes/manifests /opt/cni/bin
        """,
    )
    local_bin = rootfs / "usr" / "local" / "bin"
    for name in ("containerd", "containerd-shim-runc-v2", "ctr", "crictl"):
        shutil.copyfile(parts.bin[name], local_bin / name)
        (local_bin / name).chmod(0o755)
    for name, path in parts.cni.items():
        shutil.copyfile(path, rootfs / "opt" / "cni" / "bin" / name)
        (rootfs / "opt" / "cni" / "bin" / name).chmod(0o755)
    spec = subprocess.run([str(parts.bin["ctr"]), "oci", "spec"], capture_output=True, text=True, check=True)
    (rootfs / "etc" / "containerd" / "cri-base.json").write_text(
        json.dumps(cri_base_spec(json.loads(spec.stdout)), indent=4)
    )
    if host_dropin:
        # no CAP_SYS_RESOURCE on this host: containerd may neither lower its OOM score nor raise its limit
        dropin = rootfs / "etc" / "systemd" / "system" / "containerd.service.d"
        dropin.mkdir(parents=True, exist_ok=True)
        (dropin / "10-no-sys-resource.conf").write_text("[Service]\nOOMScoreAdjust=0\nLimitNOFILE=20000\n")


# ---------------------------------------------------------------------------------------------------
# the images kubeadm and kind run


def kubeadm_images(parts: Components) -> list[str]:
    """What `kubeadm config images list` names for the Kubernetes version (as kind's node builder asks)."""
    proc = subprocess.run(
        [
            str(parts.bin["kubeadm"]),
            "config",
            "images",
            "list",
            "--kubernetes-version",
            parts.kubernetes_version,
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise ImageError(f"kubeadm config images list failed: {proc.stderr}")
    return proc.stdout.split()


def _role(image: str) -> str:
    """kube-apiserver, etcd, coredns, pause, ... from a registry name."""
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def component_images(src: KindSource, parts: Components, work: Path) -> dict[str, list[ArchiveImage]]:
    """The server tarball's docker archives: kube-apiserver, kube-controller-manager, kube-scheduler each
    alone; kube-proxy with every other image kind must not pull (etcd, CoreDNS, pause, kind's add-ons)."""
    passwd = b"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n"
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    common = {"etc/passwd": (passwd, 0o644)}
    if ca.exists():
        common["etc/ssl/certs/ca-certificates.crt"] = (ca.read_bytes(), 0o644)

    def static(binary: str, *, entry: str | None = None) -> Path:
        target = entry or f"usr/local/bin/{binary}"
        layer = work / f"{binary}.layer.tar"
        if not layer.exists():
            _file_layer(layer, {**common, target: (parts.bin[binary].read_bytes(), 0o755)})
        return layer

    tools = rootfs_layer(TOOLS_PACKAGES, label="tools-rootfs")
    wanted = kubeadm_images(parts)
    by_role = {_role(name): name for name in wanted}
    addons = src.addon_images()
    sandbox = src.sandbox_image()
    cfg = {"Env": [PATH_ENV]}
    archives: dict[str, list[ArchiveImage]] = {}
    for role in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        archives[role] = [
            ArchiveImage([by_role[role]], [static(role)], {**cfg, "Entrypoint": [f"/usr/local/bin/{role}"]})
        ]
    pauses = sorted({by_role["pause"], sandbox})
    archives["kube-proxy"] = [
        ArchiveImage(
            [by_role["kube-proxy"]],
            [tools, static("kube-proxy")],
            {**cfg, "Entrypoint": ["/usr/local/bin/kube-proxy"]},
        ),
        ArchiveImage([by_role["etcd"]], [static("etcd")], {**cfg, "Entrypoint": ["/usr/local/bin/etcd"]}),
        ArchiveImage(
            [by_role["coredns"]], [static("coredns", entry="coredns")], {**cfg, "Entrypoint": ["/coredns"]}
        ),
        ArchiveImage(pauses, [static("pause", entry="pause")], {**cfg, "Entrypoint": ["/pause"]}),
        # kind's default CNI is replaced (e2e/kind.py): its image name only has to exist
        ArchiveImage(
            [addons["kindnetd"]], [static("pause", entry="pause")], {**cfg, "Entrypoint": ["/pause"]}
        ),
        ArchiveImage(
            [addons["local-path-provisioner"]],
            [static("local-path-provisioner")],
            {**cfg, "Entrypoint": ["/usr/local/bin/local-path-provisioner"]},
        ),
        # the helper pod runs kind's setup/teardown scripts with sh, mkdir, chmod, rm
        ArchiveImage([addons["local-path-helper"]], [tools], {**cfg, "Cmd": ["/bin/sh"]}),
    ]
    return archives


def server_tarball(src: KindSource, parts: Components, out: Path) -> Path:
    """kubernetes/version + kubernetes/server/bin/{kubeadm,kubelet,kubectl,*.tar}, as upstream's release
    lays it out: what `kind build node-image --type file` reads."""
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        top = Path(tmp) / "kubernetes"
        bin_dir = top / "server" / "bin"
        bin_dir.mkdir(parents=True)
        (top / "version").write_text(parts.kubernetes_version + "\n")
        for name in ("kubeadm", "kubelet", "kubectl"):
            shutil.copyfile(parts.bin[name], bin_dir / name)
            (bin_dir / name).chmod(0o755)
        work = Path(tmp) / "layers"
        work.mkdir()
        for role, images in component_images(src, parts, work).items():
            write_docker_archive(images, bin_dir / f"{role}.tar")
        part = out.with_suffix(".part")
        # gzipped, as upstream's (kind reads it with gzip); level 1: most of it is binaries
        subprocess.run(["tar", "-C", tmp, "-I", "gzip -1", "-cf", str(part), "kubernetes"], check=True)
        part.rename(out)
    return out


# ---------------------------------------------------------------------------------------------------
# the node image


def node_image_key(src: KindSource, parts: Components, host_dropin: bool) -> str:
    return hashlib.sha256(
        json.dumps(
            [
                RECIPE,
                src.version,
                parts.kubernetes_version,
                parts.versions,
                BASE_PACKAGES,
                TOOLS_PACKAGES,
                host_dropin,
            ],
            sort_keys=True,
        ).encode()
    ).hexdigest()[:12]


Docker = Callable[..., subprocess.CompletedProcess[str]]


def local_node_image(docker: Docker, docker_env: dict[str, str]) -> str:
    """The locally built node image in the engine `docker` talks to: found there, or built (about 10 minutes
    from nothing on 2 cores, the Go builds most of it; about a minute with the binaries cached)."""
    t0 = time.monotonic()
    parts = build_components()
    src = kind_source()
    host_dropin = lacks_sys_resource()
    key = node_image_key(src, parts, host_dropin)
    name = f"{NODE_IMAGE_REPO}:{parts.kubernetes_version}-{key}"
    if docker("image", "inspect", name, check=False).returncode == 0:
        log(f"{name} is in the engine")
        return name
    cache = kind_dir() / "build"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        work = Path(tmp)
        base = f"{BASE_IMAGE_REPO}:{parts.kubernetes_version}-{key}"
        if docker("image", "inspect", base, check=False).returncode != 0:
            rootfs = work / "rootfs"
            base_rootfs(src, parts, rootfs, host_dropin=host_dropin)
            layer = _dir_layer(rootfs, work / "base.layer.tar", exclude=ROOTFS_EXCLUDE)
            shutil.rmtree(rootfs)
            config = {
                "Env": ["container=docker", PATH_ENV],
                "Entrypoint": ["/usr/local/bin/entrypoint", "/sbin/init"],
                "StopSignal": "SIGRTMIN+3",
            }
            write_docker_archive([ArchiveImage([base], [layer], config)], work / "base.tar")
            layer.unlink()
            log(f"loading the base image {base}")
            docker("load", "-i", str(work / "base.tar"))
            (work / "base.tar").unlink()
        tarball = server_tarball(src, parts, work / "kubernetes-server.tar.gz")
        log(f"kind build node-image {name} (about half a minute)")
        proc = subprocess.run(
            [
                str(parts.bin["kind"]),
                "build",
                "node-image",
                "--type",
                "file",
                str(tarball),
                "--base-image",
                base,
                "--image",
                name,
            ],
            env=docker_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if proc.returncode != 0:
            raise ImageError(f"kind build node-image failed:\n{proc.stdout[-4000:]}")
        docker("rmi", base, check=False)
    # earlier builds (another version or recipe) are not used again
    listed = docker(
        "images", "--format", "{{.Repository}}:{{.Tag}}", NODE_IMAGE_REPO, check=False
    ).stdout.split()
    for old in listed:
        if old != name:
            docker("rmi", old, check=False)
    log(f"{name} ready in {time.monotonic() - t0:.0f}s")
    return name


def published_node_image(docker: Docker) -> str | None:
    """kind's published node image when the engine has it or can pull it, else None."""
    image = kind_source().default_node_image()
    if docker("image", "inspect", image, check=False).returncode == 0:
        return image
    log(f"pulling kind's published node image {image.split('@')[0]}")
    proc = docker("pull", image, check=False, timeout=600)
    if proc.returncode == 0:
        return image
    log(f"cannot pull it ({(proc.stderr or proc.stdout).strip().splitlines()[-1:]}): building one here")
    return None
