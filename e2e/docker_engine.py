"""The Docker engine `make e2e` runs kind on: the running one, or Debian's started here and stopped after.

    existing  `docker info` answers (DOCKER_HOST or the default socket): used as it is, left as it is
    own       none answers: Debian's dockerd (installed from Debian's mirror when missing, as root) started
              in a network namespace of its own with its own socket, exec root and cgroup parent, and its
              data root in the cache (<cache>/kind/docker: the node image stays loaded between runs).
              Bridges, iptables rules and the API server's published port stay inside that namespace; the
              caller runs kubectl, helm and the test client there (`inside()`). Stopped by its PID at the
              end, its namespace, cgroups, mounts and the host directories it made (/lib/modules, which
              kind's docker provider mounts into every node) removed and the sysctls it raised (the root
              key limits) put back: the host is left as found.

Privileged containers (kind's nodes) ask runc for every capability. Where this host's capability bounding
set lacks some (CAP_SYS_RESOURCE on some VMs), runc fails with "unable to apply caps". The engine started
here then gets a runtime wrapper as its default runtime (e2e/runc_capfilter.py): it drops the capabilities the
bounding set lacks from the OCI spec (create/run) and from the process file (exec: kind runs every node
command with `docker exec --privileged`), then execs the real runc. An existing engine is only checked
(`check_privileged`): where it cannot run a privileged container, the run stops and says how to fix it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from e2e.host import (
    HOST_MODULES,
    RUN_PREFIX,
    cgroup_mounts,
    in_netns,
    netns_run_dir_state,
    read_sysctls,
    remove_cgroups,
    restore_netns_run_dir,
    restore_sysctls,
    unmount_under,
)
from e2e.images import images_dir
from harness.process import pid_alive

HERE = Path(__file__).resolve().parent
CAPFILTER = HERE / "runc_capfilter.py"
START_TIMEOUT = 60.0
STATE_FILE = "engine.json"


class EngineError(RuntimeError):
    """No Docker engine can be used or started here."""


PRIVILEGED_REFUSED = "{engine} cannot run a privileged container, as kind's nodes are: {error}{why}"
CAPS_MISSING = (
    ". This host's capability bounding set lacks capabilities {caps}, which runc gives a privileged "
    'container: make {capfilter} the engine\'s default runtime (daemon.json: "runtimes": {{"capfilter": '
    '{{"path": "{capfilter}"}}}}, "default-runtime": "capfilter"; restart dockerd), or stop it and run '
    "`make e2e` as root: it then starts an engine of its own with that runtime"
)


def log(msg: str) -> None:
    print(f">> docker: {msg}", flush=True)


def capability_bounding_set() -> int:
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^CapBnd:\s*([0-9a-f]+)", status, re.M)
    return int(found.group(1), 16) if found else 0


def last_capability() -> int:
    return int(Path("/proc/sys/kernel/cap_last_cap").read_text())


def missing_capabilities(capbnd: int, last_cap: int) -> list[int]:
    """The capabilities up to the kernel's last that the bounding set lacks: runc fails to give a
    privileged container any of them."""
    return [cap for cap in range(last_cap + 1) if not capbnd & (1 << cap)]


def daemon_config(
    run_dir: Path, data_root: Path, cgroup_parent: str, capfilter: Path | None
) -> dict[str, Any]:
    """dockerd's configuration: everything private to this run (sockets, exec root and pidfile in `run_dir`,
    short enough for unix socket paths) but the data root (the cache)."""
    config: dict[str, Any] = {
        "data-root": str(data_root),
        "exec-root": str(run_dir / "exec"),
        "pidfile": str(run_dir / "dockerd.pid"),
        "hosts": [f"unix://{run_dir / 'docker.sock'}"],
        "cgroup-parent": cgroup_parent,
        "exec-opts": ["native.cgroupdriver=cgroupfs"],
        "storage-driver": "overlay2",
        "log-level": "warn",
    }
    if capfilter is not None:
        config["runtimes"] = {"capfilter": {"path": str(capfilter)}}
        config["default-runtime"] = "capfilter"
    return config


class Engine:
    """A Docker engine: `docker(...)` runs the CLI against it; `env` is the environment kind needs."""

    def __init__(self, env: dict[str, str], *, netns: str | None = None) -> None:
        self.env = env
        self.netns = netns
        self.own = netns is not None
        self.state: dict[str, Any] = {}

    def docker(
        self, *args: str, check: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["docker", *args], env=self.env, capture_output=True, text=True, check=False, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise EngineError(
                f"docker {' '.join(args[:3])} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
            )
        return proc

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """Where the engine's networks are: its own namespace, or the host's for an existing engine."""
        if self.netns is None:
            yield
        else:
            with in_netns(self.netns):
                yield

    def check_privileged(self, image: str) -> str:
        """`docker run --privileged` of `image` (one with /bin/true: a kind node image), as kind starts its
        nodes; raises EngineError with the cause and the fix where the engine cannot."""
        cmd = ("run", "--rm", "--privileged", "--network=none", "--entrypoint=/bin/true", image)
        proc = self.docker(*cmd, check=False, timeout=120)
        if proc.returncode == 0:
            return f"docker run --privileged works on {self.describe()}"
        missing = missing_capabilities(capability_bounding_set(), last_capability())
        why = (
            CAPS_MISSING.format(caps=missing, capfilter=CAPFILTER)
            if missing and not self.state.get("capfilter")
            else ""
        )
        # docker's error ("docker: Error response from daemon: ..."), then "Run 'docker run --help' ..."
        lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
        error = next((line for line in lines if "Error" in line), lines[0])
        raise EngineError(PRIVILEGED_REFUSED.format(engine=self.describe(), why=why, error=error))

    def describe(self) -> str:
        if not self.own:
            return "the running Docker engine"
        wrapped = " with the capability filter" if self.state.get("capfilter") else ""
        return f"Debian's dockerd in network namespace {self.netns}{wrapped}"

    # -------------------------------------------------------------------------------- start / stop

    @classmethod
    def find_or_start(cls, workdir: Path) -> Engine:
        env = dict(os.environ)
        if (
            shutil.which("docker")
            and subprocess.run(
                ["docker", "info"], env=env, capture_output=True, check=False, timeout=20
            ).returncode
            == 0
        ):
            log("using the running Docker engine")
            return cls(env)
        if os.geteuid() != 0:
            raise EngineError(
                "no Docker engine answers `docker info` and this is not root, so none can be started here: "
                "install and start Docker (https://docs.docker.com/engine/install/) and let this user use it"
            )
        return cls.start_own(workdir)

    @classmethod
    def start_own(cls, workdir: Path, *, capfilter: bool | None = None) -> Engine:
        """Debian's dockerd in a network namespace of its own (root); `capfilter`: the runtime wrapper as its
        default runtime, by default where this host's capability bounding set lacks capabilities."""
        engine = cls(dict(os.environ), netns=f"{RUN_PREFIX}{os.getpid()}")  # also its cgroup parent
        try:
            engine._start(workdir, capfilter)
        except BaseException:
            engine.stop()
            raise
        return engine

    def _start(self, workdir: Path, use_capfilter: bool | None) -> None:
        _ensure_debian_docker()
        workdir.mkdir(parents=True, exist_ok=True)
        # dockerd raises the host's root key limits when it starts: put back at stop
        self.state = {
            "workdir": str(workdir),
            "netns_run_dir": netns_run_dir_state(),
            "sysctls": read_sysctls(),
        }
        missing = missing_capabilities(capability_bounding_set(), last_capability())
        capfilter = CAPFILTER if (bool(missing) if use_capfilter is None else use_capfilter) else None
        self.state["capfilter"] = bool(capfilter)
        if capfilter:
            log(f"CapBnd lacks {missing}: dockerd's runtime drops them (e2e/runc_capfilter.py)")
        if not HOST_MODULES.exists():
            HOST_MODULES.mkdir(parents=True)
            self.state["made_host_modules"] = True
        subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)
        self.state["netns_created"] = True
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True, capture_output=True)
        data_root = images_dir().parent / "kind" / "docker"
        data_root.mkdir(parents=True, exist_ok=True)
        cgroup_parent = f"/{self.netns}"
        self.state["cgroup_parent"] = cgroup_parent
        # sockets live in a short directory of their own: a unix socket path has at most 107 bytes, and
        # containerd's under the exec root is 45 longer than the directory
        run_dir = Path("/run") / self.netns
        run_dir.mkdir(mode=0o700)
        self.state["run_dir"] = str(run_dir)
        config = workdir / "daemon.json"
        config.write_text(json.dumps(daemon_config(run_dir, data_root, cgroup_parent, capfilter), indent=2))
        logf = (workdir / "dockerd.log").open("ab")
        proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.netns}", "dockerd", "--config-file", str(config)],
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.state["pid"] = proc.pid
        self.env["DOCKER_HOST"] = f"unix://{run_dir / 'docker.sock'}"
        self.save()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise EngineError(f"dockerd exited ({proc.returncode}): {_tail(workdir / 'dockerd.log')}")
            with contextlib.suppress(subprocess.TimeoutExpired):  # dockerd still starting
                if self.docker("info", check=False, timeout=10).returncode == 0:
                    log(f"started {self.describe()} (pid {proc.pid}, data root {data_root})")
                    return
            time.sleep(0.5)
        raise EngineError(f"dockerd did not answer in {START_TIMEOUT:.0f}s: {_tail(workdir / 'dockerd.log')}")

    def save(self) -> None:
        """The state a later `stop` needs (`python -m e2e.kind --down` after KEEP_CLUSTER=1)."""
        workdir = Path(self.state["workdir"])
        record = {"netns": self.netns, "state": self.state, "docker_host": self.env.get("DOCKER_HOST")}
        (workdir / STATE_FILE).write_text(json.dumps(record))

    @classmethod
    def saved(cls, workdir: Path) -> Engine | None:
        """The engine an earlier run started and kept under `workdir`, or None."""
        try:
            record = json.loads((workdir / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        engine = cls({**os.environ, "DOCKER_HOST": record["docker_host"]}, netns=record["netns"])
        engine.state = record["state"]
        return engine

    def stop(self) -> list[str]:
        """Stop what was started here, by PID, and undo what it changed on the host; returns what was done."""
        if not self.own:
            return []
        done: list[str] = []
        pid = self.state.get("pid")
        if pid and pid_alive(pid, "dockerd"):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and pid_alive(pid, "dockerd"):
                time.sleep(0.2)
            if pid_alive(pid, "dockerd"):
                os.kill(pid, signal.SIGKILL)
            done.append(f"stopped dockerd (pid {pid})")
        # whatever still runs in the namespace (containerd shims of containers dockerd did not stop)
        if self.state.get("netns_created"):
            pids = subprocess.run(
                ["ip", "netns", "pids", self.netns], capture_output=True, text=True
            ).stdout.split()
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(p), signal.SIGKILL)
        workdir = Path(self.state.get("workdir", "/nonexistent"))
        run_dir = Path(self.state.get("run_dir", "/nonexistent"))
        data_root = images_dir().parent / "kind" / "docker"
        unmount_under([str(run_dir), str(data_root)])
        parent = self.state.get("cgroup_parent")
        if parent:
            remove_cgroups([str(m / parent.lstrip("/")) for m in cgroup_mounts()])
        if self.state.get("netns_created"):
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
            done.append(f"removed network namespace {self.netns}")
        done += restore_netns_run_dir(self.state.get("netns_run_dir", {}))
        done += restore_sysctls(self.state.get("sysctls", {}))
        if self.state.get("made_host_modules"):
            with contextlib.suppress(OSError):
                HOST_MODULES.rmdir()
                done.append(f"removed {HOST_MODULES}")
        if self.state.get("run_dir"):
            shutil.rmtree(run_dir, ignore_errors=True)
        (workdir / STATE_FILE).unlink(missing_ok=True)
        self.state = {}
        return done


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _ensure_debian_docker() -> None:
    """Debian's docker.io when dockerd is missing, installed without starting its service (a
    policy-rc.d that denies it exists only during the install)."""
    if shutil.which("dockerd"):
        return
    if shutil.which("apt-get") is None:
        raise EngineError("no Docker engine and no apt-get to install Debian's docker.io: install Docker")
    log("installing Debian's docker.io (dockerd; its service is not started)")
    policy = Path("/usr/sbin/policy-rc.d")
    made = not policy.exists()
    if made:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io"]
        if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise EngineError(f"apt-get install docker.io failed: {proc.stderr[-2000:]}")
    finally:
        if made:
            policy.unlink()
