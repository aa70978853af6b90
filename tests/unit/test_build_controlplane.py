"""e2e/build-controlplane.sh's choice of what to build: with `--without-releases` (make test's build phase,
`ensure_binaries()` without a release) etcd and the suite's kube-apiserver are enough; without it the other
releases' kube-apiservers are wanted too (make test's side track). Run on a cache directory of its own whose
binaries are empty executables, with the Go proxy off: a run that went on to build would fail at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.controlplane_binaries import (
    BUILD_SCRIPT,
    RELEASES,
    etcd_version,
    kubernetes_version,
    release_version,
)
from harness.paths import ROOT


def run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRITONPIPELINE_CACHE": str(cache), "GOPROXY": "off", "GOFLAGS": ""}
    return subprocess.run(
        ["bash", str(BUILD_SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def built(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    path.chmod(0o755)


def main_built(cache: Path) -> Path:
    out = cache / "controlplane" / kubernetes_version()
    built(out / "etcd")
    built(out / "kube-apiserver")
    return out


def test_without_releases_the_suites_apiserver_and_etcd_are_enough(tmp_path: Path) -> None:
    out = main_built(tmp_path)
    proc = run(tmp_path, "--if-go", "--without-releases")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == (
        f">> control plane cached: kube-apiserver {kubernetes_version()}, etcd {etcd_version()} "
        f"in {tmp_path / 'controlplane'}"
    )
    assert f"KUBE_APISERVER={out / 'kube-apiserver'}" in (out / "controlplane.env").read_text()
    assert not any((tmp_path / "controlplane" / release_version(r)).exists() for r in RELEASES)


def test_by_default_the_other_releases_are_wanted_too(tmp_path: Path) -> None:
    main_built(tmp_path)
    proc = run(tmp_path)  # goes on to build 1.28's apiserver: nothing to download it from here
    assert proc.returncode != 0
    assert f"building kube-apiserver {release_version('floor')}" in proc.stdout
    for release in RELEASES:
        built(tmp_path / "controlplane" / release_version(release) / "kube-apiserver")
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    versions = ", ".join(release_version(r) for r in RELEASES)
    assert f"kube-apiserver {kubernetes_version()} (and {versions}), etcd" in proc.stdout


def test_an_unknown_option_is_refused_with_the_usage(tmp_path: Path) -> None:
    proc = run(tmp_path, "--releases")
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and "--without-releases" in proc.stderr


def test_collect_only_builds_nothing(tmp_path: Path) -> None:
    """`pytest --collect-only` of every test (what an editor runs to list them) builds nothing and writes
    nothing outside the checkout, though the tests it lists need kube-apiserver, helm, MinIO... and nothing
    is cached: HOME, XDG_CACHE_HOME and the cache are empty folders of their own, and stay empty."""
    home, xdg, cache = (tmp_path / name for name in ("home", "xdg", "cache"))
    for folder in (home, xdg, cache):
        folder.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(xdg),
        "TRITONPIPELINE_CACHE": str(cache),
        "GOPROXY": "off",
        "GOFLAGS": "",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert (
        "tests/component/test_crd.py::" in proc.stdout
        and "tests/cluster/test_node_pipeline.py::" in proc.stdout
    )
    assert not [*home.rglob("*"), *xdg.rglob("*"), *cache.rglob("*")], proc.stderr
    assert "kube-apiserver" not in proc.stderr and ">> building" not in proc.stdout + proc.stderr
