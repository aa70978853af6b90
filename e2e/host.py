"""The host under `make e2e`: network namespaces to run in, and what a run may change, recorded and put back.

A kind run changes the host in a few places, and undoes each where it made the change:

    network namespaces  Debian's dockerd, when started here, runs in one of its own (e2e/docker_engine.py);
                        the first `ip netns add` on a fresh host also creates NETNS_RUN_DIR and mounts it
                        onto itself, which `ip netns del` leaves (`restore_netns_run_dir`)
    cgroups, mounts     the engine's cgroup parent and what its containers mount under its directories
    sysctls             HOST_SYSCTLS are not namespaced: dockerd raises the root key limits when it starts,
                        and the kubelet in every kind node (privileged, protectKernelDefaults off) rewrites
                        the rest; `read_sysctls` before the engine and before the cluster, `restore_sysctls`
                        after each

`host_snapshot()` is what tests compare before and after a run: it must be equal.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# where `ip netns add` keeps named namespaces; the first one on a host also creates this directory and
# bind-mounts it onto itself (shared), which `ip netns del` leaves
NETNS_RUN_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
# host-wide sysctls a run changes: kubelet rewrites them when protectKernelDefaults is off (kind's default;
# a privileged kind node's kubelet writes the host's own), and dockerd sets the two root key limits at start
HOST_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# the prefix of the network namespace and cgroup parent of the engine started here (+ the run's pid)
RUN_PREFIX = "tpkind-"
# kind's docker provider mounts /lib/modules into every node: the engine started here creates it where missing
HOST_MODULES = Path("/lib/modules")
# directories a run may create on the host
HOST_PATHS = (str(HOST_MODULES),)


# ---------------------------------------------------------------------------------------------------
# network namespaces


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


def netns_run_dir_state() -> dict[str, bool]:
    """Whether `ip netns`'s directory exists and is a mount point (a fresh host: neither)."""
    return {"exists": NETNS_RUN_DIR.is_dir(), "mounted": str(NETNS_RUN_DIR) in mount_targets()}


def restore_netns_run_dir(before: dict[str, bool]) -> list[str]:
    """Undo what a run's `ip netns add` did to NETNS_RUN_DIR (its self bind mount, the directory), only
    where the run did it and no other namespace is kept there. Returns what was undone."""
    undone: list[str] = []
    if NETNS_RUN_DIR.is_dir() and any(NETNS_RUN_DIR.iterdir()):
        return undone  # another namespace was added meanwhile: its mount lives inside ours
    ours = not before.get("mounted", True) and str(NETNS_RUN_DIR) in mount_targets()
    if ours and subprocess.run(["umount", str(NETNS_RUN_DIR)], capture_output=True).returncode == 0:
        undone.append(f"unmounted {NETNS_RUN_DIR}")
    if not before.get("exists", True) and NETNS_RUN_DIR.is_dir():
        with contextlib.suppress(OSError):
            NETNS_RUN_DIR.rmdir()
            undone.append(f"removed {NETNS_RUN_DIR}")
    return undone


# ---------------------------------------------------------------------------------------------------
# mounts and cgroups


def mount_targets() -> list[str]:
    """Every mount point of this mount namespace, in mount order (mountinfo's octal escapes decoded)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line.split()[4].encode().decode("unicode_escape") for line in lines]


def unmount_under(roots: list[str]) -> None:
    """Unmount everything mounted at or below `roots`, innermost first (lazily where busy)."""
    under = [t for t in mount_targets() if any(t == r or t.startswith(r.rstrip("/") + "/") for r in roots)]
    for target in reversed(under):
        if subprocess.run(["umount", target], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", target], capture_output=True)


def cgroup_mounts() -> list[Path]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split()[0] in ("cgroup", "cgroup2"):
            mounts.append(Path(pre.split()[4]))
    return mounts


def remove_cgroups(dirs: list[str]) -> None:
    """Remove each cgroup directory of `dirs` with its children, deepest first (empty ones only)."""
    for d in dirs:
        root = Path(d)
        if not root.exists():
            continue
        subdirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for p in [*subdirs, root]:
            with contextlib.suppress(OSError):
                p.rmdir()


# ---------------------------------------------------------------------------------------------------
# sysctls


def read_sysctls(keys: tuple[str, ...] = HOST_SYSCTLS) -> dict[str, str | None]:
    """The values of `keys` (paths under /proc/sys), None where one does not exist."""
    values: dict[str, str | None] = {}
    for key in keys:
        try:
            values[key] = Path("/proc/sys", key).read_text().strip()
        except OSError:
            values[key] = None
    return values


def restore_sysctls(before: dict[str, str | None]) -> list[str]:
    """Write back every value of `before` that changed since; returns what was put back."""
    done = []
    for key, value in before.items():
        now = read_sysctls((key,))[key]
        if value is None or now == value:
            continue
        try:
            Path("/proc/sys", key).write_text(value)
            done.append(f"restored sysctl {key.replace('/', '.')}={value} (was {now})")
        except OSError as err:
            done.append(f"could not restore sysctl {key.replace('/', '.')}={value}: {err}")
    return done


# ---------------------------------------------------------------------------------------------------
# the snapshot


def _rules(tool: str) -> list[str]:
    """The host's rules without comments and packet counters (which change on their own)."""
    if shutil.which(tool) is None:
        return []
    out = subprocess.run([tool], capture_output=True, text=True).stdout
    return [re.sub(r"\[\d+:\d+\]", "", line) for line in out.splitlines() if not line.startswith("#")]


def host_snapshot() -> dict[str, Any]:
    """What a run must leave as it found it: network namespaces, iptables rules, sysctls (ip_forward and
    HOST_SYSCTLS), mounts, the run's cgroups and the directories it may create."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
    return {
        "netns": sorted(line.split()[0] for line in netns if line),
        "iptables": _rules("iptables-save"),
        "ip6tables": _rules("ip6tables-save"),
        "sysctls": read_sysctls((*HOST_SYSCTLS, "net/ipv4/ip_forward")),
        "mounts": sorted(mount_targets()),
        "netns_run_dir": netns_run_dir_state(),
        "cgroups": sorted(str(d) for m in cgroup_mounts() for d in m.glob(f"{RUN_PREFIX}*")),
        "paths": {p: os.path.lexists(p) for p in HOST_PATHS},
    }
