"""`make e2e` on kind: the pure parts (cluster configuration, CNI, routes, the Docker engine's settings, the
runc capability filter, docker archives) and, marked `kind`, the whole run on a real kind cluster.
Here the tests on real components; the pure ones are in tests/unit/test_kind.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import docker_engine, host, kind
from helpers import ROOT
from support.kind import run_to_its_clean_up

# the kernel's defaults for the sysctls a run changes (e2e/host.py HOST_SYSCTLS; each but panic_on_oom differs
# from what kubelet or dockerd writes): the host as a fresh machine boots it
FRESH_SYSCTLS = {
    "vm/overcommit_memory": "0",
    "vm/panic_on_oom": "0",
    "kernel/panic": "0",
    "kernel/panic_on_oops": "0",
    "kernel/keys/root_maxkeys": "200",
    "kernel/keys/root_maxbytes": "20000",
}


# ----------------------------------------------------------------------------------- the whole run


def host_state() -> dict[str, Any]:
    """What a run must leave as it found it (e2e/host.py), and the directories buildah may create."""
    from e2e.images import BUILDAH_HOST_DIRS

    return {**host.host_snapshot(), "buildah": {d: Path(d).exists() for d in BUILDAH_HOST_DIRS}}


@contextlib.contextmanager
def fresh_netns_run_dir() -> Iterator[str]:
    """The host as a fresh machine has it where `ip netns` keeps its namespaces: no directory, hence no
    mount of it (the first `ip netns add` on a host creates both); yields "". What was there is put back on
    exit. Where namespaces are kept there (they would have to go) or the mount is not `ip netns`'s own, the
    host stays as it is and the reason is yielded."""
    where, run_dir = str(host.NETNS_RUN_DIR), host.NETNS_RUN_DIR
    before = host.netns_run_dir_state()
    if before["exists"] and any(run_dir.iterdir()):
        kept = sorted(p.name for p in run_dir.iterdir())
        yield f"network namespaces are kept in {where} ({', '.join(kept)})"
        return
    shared = False
    if before["mounted"]:
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
        line = next(x.split() for x in mountinfo if x.split()[4] == where)
        if not line[3].endswith("/netns"):  # a bind of the directory onto itself, as `ip netns add` makes
            yield f"{where} is a mount of another kind ({' '.join(line)}): not ours to rebuild"
            return
        shared = any(field.startswith("shared:") for field in line[6 : line.index("-")])
        subprocess.run(["umount", where], check=True)
    if before["exists"]:
        run_dir.rmdir()
    try:
        yield ""
    finally:
        if before["exists"]:
            run_dir.mkdir(exist_ok=True)
        if before["mounted"] and not host.netns_run_dir_state()["mounted"]:
            subprocess.run(["mount", "--bind", where, where], check=True)
            subprocess.run(["mount", "--make-shared" if shared else "--make-private", where], check=True)
        assert host.netns_run_dir_state() == before, f"{where} not put back: {host.netns_run_dir_state()}"


@contextlib.contextmanager
def fresh_sysctls() -> Iterator[None]:
    """The kernel's default values for the sysctls a run changes (FRESH_SYSCTLS) for the duration; the
    host's own put back on exit."""
    before = host.read_sysctls(tuple(FRESH_SYSCTLS))
    try:
        for key, value in FRESH_SYSCTLS.items():
            Path("/proc/sys", key).write_text(value)
        yield
    finally:
        host.restore_sysctls(before)
        assert host.read_sysctls(tuple(FRESH_SYSCTLS)) == before


@pytest.mark.kind
@pytest.mark.timeout(1800)
def test_make_e2e_on_kind(tmp_path: Path) -> None:
    """`python -m e2e.kind`, what `make e2e` runs: three nodes Ready, the release pushed to a registry and the
    chart installed from it (by the cluster tutorial, then again for the rest), every example Ready
    and answering right, every pod-level scenario (marker anycluster) passed on the cluster, a worker drained
    with no sequence broken among them, results written, the cluster deleted and the host as it was. This is
    where `make test` runs the scenarios (its own pytest session deselects them)."""
    if os.geteuid() != 0:
        pytest.skip("not root: no Docker engine can be started here for kind")
    before = host_state()
    results = kind.RESULTS
    saved = results.read_bytes() if results.exists() else None
    try:
        proc = run_to_its_clean_up([sys.executable, "-m", "e2e.kind", f"--workdir={tmp_path}"], timeout=1700)
        print(proc.stdout[-6000:], proc.stderr[-3000:])
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        report = json.loads(results.read_text())
    finally:
        if saved is not None:
            results.write_bytes(saved)
    assert report["nodes"] == 3
    assert report["node_image"] in ("local", "published")
    steps = report["scenarios"]
    examples = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))
    assert sorted(s.split()[1].rstrip(":") for s in steps if s.startswith("example ")) == examples
    assert all(s["passed"] for s in steps.values()), steps
    # the examples with a fan-out ran their routers on the native router, from the operator image
    for name in ("fanout.yaml", "diamond.yaml"):
        assert "native router(s)" in steps[f"example {name}: Ready and answering right"]["detail"], steps
    assert "3 nodes Ready" in steps["kind cluster: 1 control plane + 2 workers"]["detail"]
    # the release came from a registry: images by digest, the chart pinned to its digest; the tutorial page
    # ran as written (helm test included) and cleaned up after itself
    published = steps["OCI registry: the release's images and chart pushed"]
    assert re.fullmatch(r"oci://[^ ]+/charts/triton-pipeline:[0-9.]+@sha256:[0-9a-f]{64}", published["chart"])
    for role in ("operator", "assembler"):
        assert re.fullmatch(r"[^ ]+@sha256:[0-9a-f]{64}", published[role]), published
    assert "pulled by digest" in steps["helm install from the OCI registry"]["detail"]
    for part in ("as written (before Clean up)", ": Clean up"):
        (step,) = [s for s in steps if s.startswith("docs/getting-started/cluster.md") and s.endswith(part)]
        assert steps[step]["passed"] and "blocks ran as written" in steps[step]["detail"], steps[step]
    scenarios = [s for s in steps if s.startswith("scenario ")]
    assert len(scenarios) >= 15, scenarios
    drain = steps["scenario test_replicas_spread_over_the_workers_and_a_drained_worker_keeps_streams_whole"]
    assert drain["passed"] and drain["broken"] == 0 and drain["sequences"] >= 12, drain
    after = host_state()
    changed = [key for key in before if after[key] != before[key]]
    assert not changed, f"the host was not restored: {changed}"


@pytest.mark.kind
@pytest.mark.timeout(600)
def test_an_engine_that_cannot_run_privileged_containers_is_reported_with_the_fix(tmp_path: Path) -> None:
    """Where this host's capability bounding set lacks a capability (CAP_SYS_RESOURCE on this machine), an
    engine without the runtime wrapper cannot start kind's nodes: check_privileged says so, why, and how to
    fix it, before any cluster; the same engine with the wrapper runs them. The host is left as found."""
    if os.geteuid() != 0:
        pytest.skip("not root: no Docker engine can be started here")
    missing = docker_engine.missing_capabilities(
        docker_engine.capability_bounding_set(), docker_engine.last_capability()
    )
    if not missing:
        pytest.skip(
            "this host's capability bounding set lacks nothing: any engine runs privileged containers"
        )
    before = host_state()
    for capfilter in (False, True):
        engine = docker_engine.Engine.start_own(tmp_path / f"docker-{capfilter}", capfilter=capfilter)
        try:
            image, _ = kind.node_image(engine, "local")
            if capfilter:
                assert "docker run --privileged works" in engine.check_privileged(image)
                continue
            with pytest.raises(docker_engine.EngineError) as refused:
                engine.check_privileged(image)
            message = str(refused.value)
            assert "cannot run a privileged container" in message, message
            assert f"lacks capabilities {missing}" in message and "runc_capfilter.py" in message, message
            assert "unable to apply caps" in message, message  # runc's own words come with it
        finally:
            engine.stop()
    after = host_state()
    changed = [key for key in before if after[key] != before[key]]
    assert not changed, f"the host was not restored: {changed}"


@pytest.mark.kind
@pytest.mark.timeout(900)
def test_ctrl_c_deletes_the_cluster_and_leaves_the_host_as_found(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) once the cluster is up, on a host made like a fresh machine's (no /run/netns, the
    kernel's default sysctls): the run reports the interruption, deletes the cluster, stops the engine it
    started and undoes what it changed on the host: the sysctls dockerd and the nodes' kubelets rewrote
    included."""
    if os.geteuid() != 0:
        pytest.skip("not root: no Docker engine can be started here for kind")
    with fresh_netns_run_dir() as not_fresh, fresh_sysctls():
        if not_fresh:
            print(f"{host.NETNS_RUN_DIR} left as it is: {not_fresh}")
        before = host_state()
        text, rc, report = _interrupted_run(tmp_path)
        after = host_state()
    assert rc == 1, text[-3000:]
    assert report["scenarios"]["interrupted"]["passed"] is False
    assert "removed network namespace" in text or "running Docker engine" in text
    changed = [key for key in before if after[key] != before[key]]
    assert not changed, f"the host was not restored: {changed}"
    # else the sysctls would not be on the path this test is about
    assert "restored sysctl kernel.panic=0" in text, text[-3000:]
    if "removed network namespace" in text:  # the engine started here raised the root key limits
        assert "restored sysctl kernel.keys.root_maxkeys=200" in text, text[-3000:]


def _interrupted_run(tmp_path: Path) -> tuple[str, int, dict[str, Any]]:
    """`python -m e2e.kind --no-scenarios`, sent SIGINT once its nodes are Ready: (its output, exit code,
    the results it wrote); the repository's results file is kept as it was."""
    results = kind.RESULTS
    saved = results.read_bytes() if results.exists() else None
    log = tmp_path / "run.log"
    try:
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "e2e.kind", "--no-scenarios", f"--workdir={tmp_path / 'run'}"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
            deadline = time.monotonic() + 600
            while "nodes Ready" not in log.read_text() and proc.poll() is None:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
            assert proc.poll() is None, log.read_text()[-3000:]
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=300)
        text = log.read_text()
        print(text[-3000:])
        return text, rc, json.loads(results.read_text())
    finally:
        if saved is not None:
            results.write_bytes(saved)
