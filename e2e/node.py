"""A single-node Kubernetes test bed with real pods, inside a network namespace of its own.

etcd + kube-apiserver (harness/controlplane.py in node mode), kube-controller-manager, kube-scheduler,
containerd 2 (Debian's runc), kubelet and kube-proxy (iptables), all built by e2e/build-node.sh and
started inside a network namespace this module creates, with the node address on a veth interface
there. Images come from OCI archives packed here (no registry). Teardown ends every process by its
PID and restores what the components change on the host: the sysctls kubelet rewrites, mounts under
the node's directories, cgroups, directories the components create, and the namespace itself.

    python -m e2e.node up [--dir /tmp/tritonpipeline-node]    # leaves the node running
    python -m e2e.node down [--dir ...]
    python -m e2e.node kubectl get pods -A                    # kubectl inside the namespace

Needs root, `ip netns`, iptables and runc (e2e/build-node.sh installs the Debian packages).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.controlplane import (
    SERVICE_CIDR,
    ControlPlane,
    ControlPlaneError,
    _die_with_parent,
    _pid_alive,
    ensure_binaries,
)
from harness.gotools import go_env

HERE = Path(__file__).resolve().parent

BUILD_SCRIPT = HERE / "build-node.sh"
DEFAULT_STATE_DIR = Path("/tmp/tritonpipeline-node")
NODE_NAME = "tritonpipeline-node"
NODE_ADDRESS = "10.200.0.2"
NODE_PREFIX = 24
NODE_LINK = "node0"
POD_CIDR = "10.244.0.0/24"
CLUSTER_DNS = "10.96.0.10"
NETNS_PREFIX = "tpnode-"  # + the starting process's pid: also the node's cgroup root in every hierarchy
PAUSE_IMAGE = "tritonpipeline.local/pause:1"
HELLO_IMAGE = "tritonpipeline.local/hello:1"
CTR_NAMESPACE = "k8s.io"
# how often the HPA controller re-evaluates every HorizontalPodAutoscaler (upstream default 15s): short
# so the autoscaling scenario (tests/test_node_autoscaling.py) sees decisions within seconds
HPA_SYNC_PERIOD = "5s"
# one symlink per running node (namespace name -> state directory): finds nodes left by a killed run
REGISTRY = Path("/run/tritonpipeline-node")
# where `ip netns add` keeps named namespaces; the first one on a host also creates this directory and
# bind-mounts it onto itself (shared), which `ip netns del` leaves: teardown undoes both where the node did
NETNS_RUN_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
# host-wide sysctls kubelet rewrites (protectKernelDefaults=false): restored at teardown
HOST_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# fixed host paths the components create whatever their configuration says: removed at teardown
# when they did not exist before (kubelet's device-plugins dir, the shims' sockets, libcni's cache)
HOST_PATHS = ("/var/lib/kubelet", "/run/containerd", "/var/lib/cni", "/var/log/pods", "/var/log/containers")


class NodeError(RuntimeError):
    """The node could not be built, started or did not become ready."""


def log(msg: str) -> None:
    print(f">> {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------
# prerequisites and binaries


def missing_prerequisite() -> str | None:
    """Why the node cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root: the node test bed needs root (network namespace, mounts, cgroups)"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable: {probe.stderr.strip()}"
    for tool in ("iptables", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (e2e/build-node.sh installs it from Debian as root)"
    return None


@dataclass(frozen=True)
class NodeBinaries:
    bin_dir: Path
    cni_dir: Path
    kubernetes_version: str

    def __getitem__(self, name: str) -> str:
        return str(self.bin_dir / name)


def ensure_node_binaries() -> NodeBinaries:
    """Build (or find cached) the node components with e2e/build-node.sh; its progress goes to stdout."""
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=go_env(), check=False)
    if proc.returncode != 0:
        raise NodeError(f"{BUILD_SCRIPT} failed (exit {proc.returncode})")
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = dict(
        line.split("=", 1) for line in (Path(out) / "node.env").read_text().splitlines() if "=" in line
    )
    return NodeBinaries(Path(env["BIN_DIR"]), Path(env["CNI_BIN_DIR"]), env["KUBERNETES_VERSION"])


# ---------------------------------------------------------------------------------------------------
# OCI image archives (no registry): one layer with a static binary


CONTAINER_DIRS = (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777))


def _layer(files: dict[str, tuple[bytes, int]], dirs: tuple[tuple[str, int], ...] = CONTAINER_DIRS) -> bytes:
    """A reproducible tar of `files` (path -> (content, mode)) plus the directories a container wants."""
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
    return buf.getvalue()


def pack_image(name: str, binary: Path, out: Path, *, port: int | None = None) -> Path:
    """Write an OCI image archive (oci-layout, index.json, blobs/sha256/...) named `name` whose
    entrypoint is `binary` at /bin/<its name>; `ctr images import` reads it."""
    from e2e.images import write_oci_archive

    entry = f"bin/{binary.name}"
    cfg: dict[str, Any] = {"Entrypoint": [f"/{entry}"], "Env": ["PATH=/bin"], "WorkingDir": "/"}
    if port:
        cfg["ExposedPorts"] = {f"{port}/tcp": {}}
    layer = out.with_suffix(".layer")
    layer.write_bytes(_layer({entry: (binary.read_bytes(), 0o755)}))
    try:
        return write_oci_archive(name, [layer], cfg, out, f"e2e/node.py pack_image {binary.name}")
    finally:
        layer.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------
# the network namespace


def _libc() -> Any:
    return ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc().setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(name: str) -> contextlib.AbstractContextManager[None]:
    """Run the calling thread (and every process it starts) inside network namespace `name`."""
    return in_netns_path(str(NETNS_RUN_DIR / name))


@contextlib.contextmanager
def in_netns_path(path: str) -> Iterator[None]:
    """Run the calling thread (and every process it starts) inside the network namespace file `path`
    (/run/netns/NAME, /proc/PID/ns/net)."""
    own = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net"
    back = os.open(own, os.O_RDONLY)
    try:
        _setns(path)
        yield
    finally:
        try:
            if _libc().setns(back, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original network namespace failed")
        finally:
            os.close(back)


def run_kubectl(
    binary: str | Path, kubeconfig: str | Path, args: tuple[str, ...], input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl with this kubeconfig, its output captured (the caller decides what a failure means)."""
    return subprocess.run(
        [str(binary), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        check=False,
    )


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NodeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


# ---------------------------------------------------------------------------------------------------
# host state: what the node may change, recorded before and restored after


def _read_sysctl(key: str) -> str | None:
    try:
        return Path("/proc/sys", key).read_text().strip()
    except OSError:
        return None


def _cgroup_mounts() -> list[Path]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split()[0] in ("cgroup", "cgroup2"):
            mounts.append(Path(pre.split()[4]))
    return mounts


def _mount_targets() -> list[str]:
    """Every mount point of this mount namespace, in mount order (mountinfo's octal escapes decoded)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line.split()[4].encode().decode("unicode_escape") for line in lines]


def _mounts_under(roots: list[str]) -> list[str]:
    return [t for t in _mount_targets() if any(t == r or t.startswith(r.rstrip("/") + "/") for r in roots)]


def netns_run_dir_state() -> dict[str, bool]:
    """Whether `ip netns`'s directory exists and is a mount point (a fresh host: neither)."""
    return {"exists": NETNS_RUN_DIR.is_dir(), "mounted": str(NETNS_RUN_DIR) in _mount_targets()}


def _restore_netns_run_dir(before: dict[str, bool]) -> list[str]:
    """Undo what the node's `ip netns add` did to NETNS_RUN_DIR (its self bind mount, the directory),
    only where the node did it and no other namespace is kept there. Returns what was undone."""
    undone: list[str] = []
    if NETNS_RUN_DIR.is_dir() and any(NETNS_RUN_DIR.iterdir()):
        return undone  # another namespace was added meanwhile: its mount lives inside ours
    ours = not before.get("mounted", True) and str(NETNS_RUN_DIR) in _mount_targets()
    if ours and _run("umount", str(NETNS_RUN_DIR), check=False).returncode == 0:
        undone.append(f"unmounted {NETNS_RUN_DIR}")
    if not before.get("exists", True) and NETNS_RUN_DIR.is_dir():
        with contextlib.suppress(OSError):
            NETNS_RUN_DIR.rmdir()
            undone.append(f"removed {NETNS_RUN_DIR}")
    return undone


def _rules(tool: str) -> list[str]:
    """The host's rules without comments and packet counters (which change on their own)."""
    if shutil.which(tool) is None:
        return []
    out = _run(tool, check=False).stdout
    return [re.sub(r"\[\d+:\d+\]", "", line) for line in out.splitlines() if not line.startswith("#")]


def host_snapshot() -> dict[str, Any]:
    """What the node must leave as it found it: network namespaces, iptables rules, sysctls (ip_forward
    and those kubelet rewrites), mounts, the node's cgroups and the fixed host paths."""
    return {
        "netns": sorted(line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines() if line),
        "iptables": _rules("iptables-save"),
        "ip6tables": _rules("ip6tables-save"),
        "sysctls": {k: _read_sysctl(k) for k in (*HOST_SYSCTLS, "net/ipv4/ip_forward")},
        "mounts": sorted(_mount_targets()),
        "netns_run_dir": netns_run_dir_state(),
        "cgroups": sorted(str(d) for m in _cgroup_mounts() for d in m.glob(f"{NETNS_PREFIX}*")),
        "paths": {p: os.path.lexists(p) for p in HOST_PATHS},
    }


def record_host() -> dict[str, Any]:
    return {
        "sysctls": {k: _read_sysctl(k) for k in HOST_SYSCTLS},
        "absent_paths": [p for p in HOST_PATHS if not os.path.lexists(p)],
    }


# ---------------------------------------------------------------------------------------------------
# the node


class Node:
    """The whole node. `start()` records every PID and host change in <workdir>/node-state.json as it
    goes, so `teardown(workdir)` (also `node.py down`) can undo a half-started node as well."""

    def __init__(self, workdir: Path | str, *, detach: bool = False) -> None:
        self.workdir = Path(workdir).resolve()
        self.detach = detach
        self.netns = f"{NETNS_PREFIX}{os.getpid()}"
        self.state: dict[str, Any] = {}
        self.cp: ControlPlane | None = None
        self.bins: NodeBinaries | None = None
        self.kubeconfig = self.workdir / "controlplane" / "kubeconfig"
        self.timings: dict[str, float] = {}

    # -- state file -------------------------------------------------------------------------------

    def _save(self) -> None:
        (self.workdir / "node-state.json").write_text(json.dumps(self.state, indent=2) + "\n")

    # -- start -------------------------------------------------------------------------------------

    def start(self, timeout: float = 180) -> Node:
        """Build what is missing (progress on stdout), then start the node; `timeout`: seconds from the
        first process to the node being Ready."""
        reason = missing_prerequisite()
        if reason:
            raise NodeError(reason)
        t0 = time.monotonic()
        cp_bins = ensure_binaries()
        self.bins = ensure_node_binaries()
        self.timings["build-check"] = time.monotonic() - t0
        deadline = time.monotonic() + timeout
        for name in reap_stale():
            log(f"cleaned up after an earlier node that did not stop ({name})")
        running = registered()
        if running:
            name, where = next(iter(running.items()))
            raise NodeError(
                f"another node test bed is running ({name}, state in {where}); one at a time on a host "
                f"(they share kubelet's host sysctls): stop it with `python -m e2e.node down --dir {where}`"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state = {
            "netns": self.netns,
            "workdir": str(self.workdir),
            "host": record_host(),
            "pids": {},
            "binaries": {},
            "cgroups": [],
            "kubeconfig": str(self.kubeconfig),
            "bin_dir": str(self.bins.bin_dir),
            # the process the node lives and dies with (None: `up`, the node outlives its starter)
            "owner": None if self.detach else [os.getpid(), _start_time(os.getpid())],
        }
        self._save()
        REGISTRY.mkdir(exist_ok=True)
        (REGISTRY / self.netns).symlink_to(self.workdir)
        try:
            self._make_netns()
            self._make_cgroups()
            with in_netns(self.netns):
                self._set_netns_sysctls()
                t = time.monotonic()
                self.cp = ControlPlane(
                    self.workdir / "controlplane", cp_bins, detach=self.detach, node_address=NODE_ADDRESS
                )
                self.cp.start()
                self.timings["controlplane"] = time.monotonic() - t
                for name, pid in self.cp.pids().items():
                    self._track(name, pid, cp_bins.etcd if name == "etcd" else cp_bins.kube_apiserver)
                t = time.monotonic()
                self._start_containerd()
                self._import_images()
                self.timings["containerd+images"] = time.monotonic() - t
                t = time.monotonic()
                self._start_components()
                self._wait_node_ready(deadline)
                self.timings["components+node-ready"] = time.monotonic() - t
        except BaseException:
            if not self.detach:
                teardown(self.workdir)
            raise
        self.timings["total"] = time.monotonic() - t0
        self.state["timings"] = self.timings
        self._save()
        return self

    def _track(self, name: str, pid: int, binary: Path | str) -> None:
        self.state["pids"][name] = pid
        self.state["binaries"][name] = str(binary)
        self._save()

    def _make_netns(self) -> None:
        # before `ip netns add`, which may create and mount NETNS_RUN_DIR (the first namespace on a host)
        self.state["host"]["netns_run_dir"] = netns_run_dir_state()
        self._save()
        _run("ip", "netns", "add", self.netns)
        self.state["netns_created"] = True
        self._save()
        ns = ("ip", "-n", self.netns)
        _run(*ns, "link", "set", "lo", "up")
        # a veth pair with both ends inside (this kernel has no dummy driver): the node's "NIC"
        _run(*ns, "link", "add", NODE_LINK, "type", "veth", "peer", "name", f"{NODE_LINK}p")
        _run(*ns, "addr", "add", f"{NODE_ADDRESS}/{NODE_PREFIX}", "dev", NODE_LINK)
        _run(*ns, "link", "set", f"{NODE_LINK}p", "up")
        _run(*ns, "link", "set", NODE_LINK, "up")
        _run(*ns, "route", "add", "default", "dev", NODE_LINK)

    def _set_netns_sysctls(self) -> None:
        # /proc/sys/net follows the network namespace of the opening thread: these stay in the node's
        for key, value in (("net/ipv4/ip_forward", "1"), ("net/ipv4/conf/all/route_localnet", "1")):
            Path("/proc/sys", key).write_text(value)

    def _make_cgroups(self) -> None:
        """kubelet's cgroupRoot must exist in every hierarchy; cpuset needs its cpus/mems filled in."""
        for mount in _cgroup_mounts():
            d = mount / self.netns
            if not d.exists():
                d.mkdir()
                self.state["cgroups"].append(str(d))
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (mount / f).exists() and (d / f).exists() and not (d / f).read_text().strip():
                    (d / f).write_text((mount / f).read_text())
        self._save()

    def spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start an optional component (Prometheus, prometheus-adapter) inside the node's namespace, its
        output in <workdir>/<name>.log; recorded in the state file, so teardown ends it by PID."""
        with in_netns(self.netns):
            return self._spawn(name, cmd, env)

    def end(self, name: str) -> None:
        """End a component started by `spawn` (SIGTERM, then SIGKILL) by its PID and forget it."""
        pid, binary = self.state["pids"].pop(name, None), self.state["binaries"].pop(name, name)
        if pid:
            _end(pid, binary)
        self._save()

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.workdir / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
                preexec_fn=None if self.detach else _die_with_parent,
            )
        self._track(name, proc.pid, cmd[0])
        return proc

    # containerd -----------------------------------------------------------------------------------

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def _containerd_config(self) -> str:
        assert self.bins is not None
        c = self.workdir / "containerd"
        return f"""version = 3
root = "{c / "root"}"
state = "{c / "state"}"

[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{shutil.which("runc")}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{self.bins.cni_dir}"]
    conf_dir = "{c / "cni-conf"}"
    max_conf_num = 1
"""

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "tritonpipeline-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.workdir / "cni-ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def _start_containerd(self) -> None:
        assert self.bins is not None
        c = self.workdir / "containerd"
        (c / "cni-conf").mkdir(parents=True, exist_ok=True)
        (c / "cni-conf" / "10-tritonpipeline.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        (c / "config.toml").write_text(self._containerd_config())
        env = dict(os.environ)
        env["PATH"] = f"{self.bins.bin_dir}:{env.get('PATH', '')}"  # containerd finds its shim on PATH
        proc = self._spawn("containerd", [self.bins["containerd"], "--config", str(c / "config.toml")], env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise NodeError(f"containerd exited with {proc.returncode}\n{self.log_tail('containerd')}")
            if self.ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise NodeError(f"containerd did not answer in 30s\n{self.log_tail('containerd')}")

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.bins is not None
        return _run(
            self.bins["ctr"],
            "--address",
            str(self.containerd_socket),
            "-n",
            CTR_NAMESPACE,
            *args,
            check=check,
        )

    def image_archives(self) -> dict[str, Path]:
        """The pause and hello images as OCI archives, packed once next to their binaries."""
        assert self.bins is not None
        out = {}
        for name, prog, port in ((PAUSE_IMAGE, "pause", None), (HELLO_IMAGE, "hello", 8080)):
            binary = self.bins.bin_dir / prog
            digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
            archive = self.bins.bin_dir.parent / "images" / f"{prog}-{digest}.oci.tar"
            if not archive.exists():
                archive.parent.mkdir(exist_ok=True)
                pack_image(name, binary, archive, port=port)
            out[name] = archive
        return out

    def _import_images(self) -> None:
        for name, archive in self.image_archives().items():
            self.ctr("images", "import", str(archive))
            log(f"imported {name} from {archive}")

    # kubernetes components --------------------------------------------------------------------------

    def _kubeconfig_for(self, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        assert self.cp is not None
        return self.cp.write_kubeconfig(self.workdir / f"{name}.kubeconfig", user, groups)

    def _kubelet_config(self) -> dict[str, Any]:
        assert self.cp is not None
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_ADDRESS,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.netns}",
            "failCgroupV1": False,
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "clusterDNS": [CLUSTER_DNS],
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "2%",
                "nodefs.inodesFree": "2%",
                "imagefs.available": "2%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "maxPods": 110,
            "podCIDR": POD_CIDR,
        }

    def _start_components(self) -> None:
        assert self.cp is not None and self.bins is not None
        w, pki = self.workdir, self.cp.pki
        kcm = self._kubeconfig_for("kube-controller-manager", "system:kube-controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                self.bins["kube-controller-manager"],
                f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}",
                "--bind-address=127.0.0.1",
                f"--cert-dir={w / 'kcm-certs'}",
                "--use-service-account-credentials",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--leader-elect=false",
                f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
            ],
        )
        sched = self._kubeconfig_for("kube-scheduler", "system:kube-scheduler")
        self._spawn(
            "kube-scheduler",
            [
                self.bins["kube-scheduler"],
                f"--kubeconfig={sched}",
                f"--authentication-kubeconfig={sched}",
                f"--authorization-kubeconfig={sched}",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
            ],
        )
        kubelet_kc = self._kubeconfig_for("kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
        (w / "kubelet-config.json").write_text(json.dumps(self._kubelet_config(), indent=2))
        self._spawn(
            "kubelet",
            [
                self.bins["kubelet"],
                f"--config={w / 'kubelet-config.json'}",
                f"--kubeconfig={kubelet_kc}",
                f"--root-dir={w / 'kubelet'}",
                f"--cert-dir={w / 'kubelet-certs'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_ADDRESS}",
                "--v=1",
            ],
        )
        proxy_kc = self._kubeconfig_for("kube-proxy", "system:kube-proxy")
        proxy_cfg = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(proxy_kc)},
            "mode": "iptables",
            "hostnameOverride": NODE_NAME,
            "bindAddress": "0.0.0.0",
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "clusterCIDR": POD_CIDR,
            "oomScoreAdj": 0,
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        }
        (w / "kube-proxy-config.json").write_text(json.dumps(proxy_cfg, indent=2))
        self._spawn("kube-proxy", [self.bins["kube-proxy"], f"--config={w / 'kube-proxy-config.json'}"])

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """Run the built kubectl (same release as the apiserver) inside the node's namespace as admin."""
        assert self.bins is not None
        with in_netns(self.netns):
            proc = run_kubectl(self.bins["kubectl"], self.kubeconfig, args, input)
        if check and proc.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def _wait_node_ready(self, deadline: float) -> None:
        last = ""
        while time.monotonic() < deadline:
            for name, pid in self.state["pids"].items():
                if not _pid_alive(pid, self.state["binaries"][name]):
                    raise NodeError(f"{name} (pid {pid}) exited during start-up\n{self.log_tail(name)}")
            out = subprocess.run(
                [self.bins["kubectl"], f"--kubeconfig={self.kubeconfig}", "get", "node", NODE_NAME, "-o",
                 "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            last = out.stdout.strip() or out.stderr.strip()
            if last == "True":
                return
            time.sleep(0.5)
        raise NodeError(f"node {NODE_NAME} not Ready in time ({last})\n{self.log_tail('kubelet')}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
        return f"===== {path} =====\n" + "\n".join(text)

    def fetch(self, url: str, timeout: float = 5) -> str:
        """GET `url` from inside the node's network namespace (a client on the node)."""
        import urllib.request

        with in_netns(self.netns), urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode()

    def stop(self) -> dict[str, Any]:
        return teardown(self.workdir)

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------------
# teardown: from the state file only, so `down` works in another process


def registered() -> dict[str, Path]:
    """Nodes started on this host and not torn down: namespace name -> state directory."""
    if not REGISTRY.is_dir():
        return {}
    return {link.name: Path(os.readlink(link)) for link in REGISTRY.iterdir() if link.is_symlink()}


def _alive(state: dict[str, Any]) -> dict[str, int]:
    bins = state.get("binaries", {})
    return {n: p for n, p in state.get("pids", {}).items() if _pid_alive(p, bins.get(n, n))}


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a pid from a later reuse of it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _stale(state: dict[str, Any]) -> bool:
    """A node whose owner died without tearing it down, or a detached node none of whose processes run."""
    owner = state.get("owner")
    if owner:
        return _start_time(owner[0]) != owner[1]
    return not _alive(state)


def reap_stale() -> list[str]:
    """Tear down registered nodes that nobody will stop any more (their owner was killed before it
    could clean up): the processes, namespace, mounts, cgroups and sysctls they left behind."""
    reaped = []
    for name, where in registered().items():
        try:
            state = json.loads((where / "node-state.json").read_text())
        except (OSError, ValueError):
            state = {}
        if state and not _stale(state):
            continue
        if state:
            teardown(where)
        else:  # no state left to restore from: only the registration
            _unregister(name)
        reaped.append(name)
    return reaped


def _unregister(name: str) -> None:
    with contextlib.suppress(OSError):
        (REGISTRY / name).unlink()
    with contextlib.suppress(OSError):
        REGISTRY.rmdir()  # only when empty


def _end(pid: int, binary: str, grace: float = 15) -> None:
    if not _pid_alive(pid, binary):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _pid_alive(pid, binary):
        time.sleep(0.1)
    if _pid_alive(pid, binary):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)


def _cgroup_pids(dirs: list[str]) -> list[int]:
    pids: set[int] = set()
    for d in dirs:
        for procs in Path(d).rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in procs.read_text().split())
    return sorted(pids)


def _netns_pids(name: str) -> list[int]:
    out = _run("ip", "netns", "pids", name, check=False).stdout
    return [int(x) for x in out.split()]


def _remove_cgroups(dirs: list[str]) -> None:
    for d in dirs:
        root = Path(d)
        if not root.exists():
            continue
        subdirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for p in [*subdirs, root]:
            with contextlib.suppress(OSError):
                p.rmdir()


def _unmount_under(roots: list[str]) -> None:
    for target in reversed(_mounts_under(roots)):
        if _run("umount", target, check=False).returncode != 0:
            _run("umount", "-l", target, check=False)


CORE_COMPONENTS = ("kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager")


def teardown(workdir: Path) -> dict[str, Any]:
    """Undo everything node-state.json records: processes (by PID), pod processes (by the node's
    cgroups), mounts, cgroups, the namespace, host sysctls and host paths. Returns the state."""
    try:
        state = json.loads((workdir / "node-state.json").read_text())
    except (OSError, ValueError):
        return {}
    pids, bins = state.get("pids", {}), state.get("binaries", {})
    # 1. optional components (spawn), the node agents (no restarts of pods), the pods, containerd, shims
    optional = [n for n in pids if n not in (*CORE_COMPONENTS, "containerd", "kube-apiserver", "etcd")]
    for name in (*optional, *CORE_COMPONENTS):
        if name in pids:
            _end(pids[name], bins[name])
    _kill_pids(_cgroup_pids(state.get("cgroups", [])))
    if "containerd" in pids:
        _end(pids["containerd"], bins["containerd"])
    netns = state.get("netns")
    for name in ("kube-apiserver", "etcd"):
        if name in pids:
            _end(pids[name], bins[name])
    # whatever is left in the namespace was started for the node (the shims): end it by PID
    if netns and state.get("netns_created"):
        _kill_pids(_netns_pids(netns))
    # 2. mounts under the node's directories (kubelet volumes, container rootfs, pod netns, shm)
    # (fixed host paths only when the node created them: a real kubelet's mounts are not ours)
    _unmount_under([str(workdir), *state.get("host", {}).get("absent_paths", [])])
    _remove_cgroups(state.get("cgroups", []))
    host, restored = state.get("host", {}), []
    if netns and state.get("netns_created"):
        _run("ip", "netns", "del", netns, check=False)
    if "netns_run_dir" in host:
        restored += _restore_netns_run_dir(host["netns_run_dir"])
    # 3. the host: sysctls kubelet rewrote, paths the components created
    for key, value in host.get("sysctls", {}).items():
        if value is not None and _read_sysctl(key) != value:
            restored.append(f"{key.replace('/', '.')}: {_read_sysctl(key)} -> {value}")
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value)
    for path in host.get("absent_paths", []):
        if os.path.lexists(path):
            restored.append(f"removed {path}")
            shutil.rmtree(path, ignore_errors=True)
    state["restored"] = restored
    if netns:
        _unregister(netns)
    return state


# ---------------------------------------------------------------------------------------------------
# command line


def _print_usage(state: dict[str, Any]) -> None:
    workdir, netns = state["workdir"], state["netns"]
    kubectl = Path(state["bin_dir"]) / "kubectl"
    print(f"logs: {workdir}/*.log; state: {workdir}/node-state.json")
    print("kubectl (the apiserver listens only inside the namespace):")
    print(f"  ip netns exec {netns} {kubectl} --kubeconfig {state['kubeconfig']} get pods -A")
    print(f"  or: {sys.executable} -m e2e.node kubectl --dir {workdir} get pods -A")
    print(f"stop: make node-down  (or {sys.executable} -m e2e.node down --dir {workdir})")


def cmd_up(state_dir: Path) -> int:
    state_file = state_dir / "node-state.json"
    if state_file.exists():
        state = json.loads(state_file.read_text())
        alive = _alive(state)
        if alive:
            print(f"node already running in {state_dir} (namespace {state.get('netns')}, pids {alive})")
            _print_usage(state)
            return 0
        teardown(state_dir)
    shutil.rmtree(state_dir, ignore_errors=True)
    node = Node(state_dir, detach=True)
    try:
        node.start()
    except (NodeError, ControlPlaneError) as err:
        print(f"cannot start the node: {err}", file=sys.stderr)
        teardown(state_dir)
        return 1
    print(f"node {NODE_NAME} Ready in {node.timings['total']:.1f}s (network namespace {node.netns})")
    _print_usage(node.state)
    return 0


def cmd_down(state_dir: Path) -> int:
    state = teardown(state_dir)
    if not state:
        print(f"no node state in {state_dir}")
        return 0
    shutil.rmtree(state_dir, ignore_errors=True)
    print(f"node stopped (pids {state.get('pids')}); namespace {state.get('netns')} and {state_dir} removed")
    print(f"host restored: {'; '.join(state['restored']) or 'nothing had changed'}")
    return 0


def cmd_kubectl(state_dir: Path, args: list[str]) -> int:
    state = json.loads((state_dir / "node-state.json").read_text())
    with in_netns(state["netns"]):
        return subprocess.run(
            [str(Path(state["bin_dir"]) / "kubectl"), f"--kubeconfig={state['kubeconfig']}", *args],
            check=False,
        ).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "kubectl", "build", "host-snapshot"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_STATE_DIR, help="state directory (%(default)s)")
    args, rest = parser.parse_known_args(argv)
    state_dir = args.dir.resolve()
    if args.command == "build":
        ensure_binaries()
        print(ensure_node_binaries())
        return 0
    if args.command == "host-snapshot":  # to compare by hand before `up` and after `down`
        print(json.dumps(host_snapshot(), indent=1))
        return 0
    if args.command == "kubectl":
        return cmd_kubectl(state_dir, rest)
    return {"up": cmd_up, "down": cmd_down}[args.command](state_dir)


if __name__ == "__main__":
    sys.exit(main())
