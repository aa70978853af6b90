"""The etcd and kube-apiserver binaries the control plane runs (harness/controlplane.py): their
versions (from the Go modules of e2e/controlplane/), the cache outside the repo, and the build by
e2e/build-controlplane.sh when they are missing (`python -m harness.controlplane_cli build`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .gotools import find_go, go_env
from .paths import E2E, cache_root

BUILD_SCRIPT = E2E / "build-controlplane.sh"
GO_MOD = E2E / "controlplane" / "kube-apiserver" / "go.mod"
ETCD_GO_MOD = E2E / "controlplane" / "etcd" / "go.mod"
# other releases what we ship is checked on (tests/component/test_kube_releases.py), each apiserver on the
# same etcd:
# the oldest the chart supports (Chart.yaml kubeVersion) and the newest
RELEASES = ("floor", "newest")


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or did not become ready."""


class ControlPlaneUnavailable(ControlPlaneError):
    """A prerequisite (Go to build, openssl for certificates) is missing on this machine."""


def _module_version(go_mod: Path, module: str) -> str:
    for line in go_mod.read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise ControlPlaneError(f"{go_mod} does not require {module}")


def kubernetes_version() -> str:
    """The k8s.io/kubernetes release the apiserver is built from (e2e/controlplane/kube-apiserver/go.mod)."""
    return _module_version(GO_MOD, "k8s.io/kubernetes")


def release_version(release: str) -> str:
    """The k8s.io/kubernetes release of one of RELEASES (e2e/controlplane/kube-apiserver-RELEASE/go.mod)."""
    if release not in RELEASES:
        raise ValueError(f"release {release!r}: expected one of {', '.join(RELEASES)}")
    return _module_version(E2E / "controlplane" / f"kube-apiserver-{release}" / "go.mod", "k8s.io/kubernetes")


def etcd_version() -> str:
    return _module_version(ETCD_GO_MOD, "go.etcd.io/etcd/server/v3")


def cache_dir() -> Path:
    """Same directory as `e2e/build-controlplane.sh --print-dir`."""
    return cache_root() / "controlplane" / kubernetes_version()


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    kubernetes_version: str
    etcd_version: str


def cached_binaries() -> Binaries | None:
    """The built binaries, or None when they are not built yet."""
    where = cache_dir()
    apiserver, etcd = where / "kube-apiserver", where / "etcd"
    if os.access(apiserver, os.X_OK) and os.access(etcd, os.X_OK):
        return Binaries(apiserver, etcd, kubernetes_version(), etcd_version())
    return None


def cached_release_binaries(release: str) -> Binaries | None:
    """The kube-apiserver of one of RELEASES with the same etcd, or None when either is not built yet."""
    main = cached_binaries()
    version = release_version(release)
    apiserver = cache_root() / "controlplane" / version / "kube-apiserver"
    if main is None or not os.access(apiserver, os.X_OK):
        return None
    return Binaries(apiserver, main.etcd, version, main.etcd_version)


def _cached(release: str | None) -> Binaries | None:
    return cached_release_binaries(release) if release else cached_binaries()


def missing_prerequisite(release: str | None = None) -> str | None:
    """Why the control plane cannot run here, or None. Exact, so a skip message says what to install."""
    if shutil.which("openssl") is None:
        return "openssl is not installed (needed to generate the control plane's certificates)"
    if _cached(release) is None and find_go() is None:
        version = release_version(release) if release else kubernetes_version()
        return (
            f"Go is not installed (no `go` on PATH or /usr/local/go/bin/go) and kube-apiserver "
            f"{version} / etcd {etcd_version()} are not built in {cache_root() / 'controlplane'}"
        )
    return None


def ensure_binaries(output: Any = None, *, release: str | None = None) -> Binaries:
    """Return the cached binaries, building them first with e2e/build-controlplane.sh when missing.
    Raises ControlPlaneUnavailable when Go or openssl is missing, ControlPlaneError when the build fails.
    `output`: where the build's progress goes (a file object; default: this process's stdout).
    `release`: the kube-apiserver of that one of RELEASES instead, on the same etcd (the script builds every
    release then; without one, only etcd and the suite's kube-apiserver)."""
    reason = missing_prerequisite(release)
    if reason:
        raise ControlPlaneUnavailable(reason)
    found = _cached(release)
    if found:
        return found
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *(() if release else ("--without-releases",))],
        env=go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    out = output if output is not None else sys.stdout
    out.write(proc.stdout)
    out.flush()
    found = _cached(release)
    if proc.returncode != 0 or found is None:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{tail}")
    return found
