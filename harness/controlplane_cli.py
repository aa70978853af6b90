"""The control plane from the command line (`make cluster-up` / `make cluster-down`): one kept running
after this process ends, its state (URL, kubeconfig, pids) in a directory.

    python -m harness.controlplane_cli up [--dir /tmp/tritonpipeline-cluster]
    python -m harness.controlplane_cli down [--dir ...]
    python -m harness.controlplane_cli status [--dir ...]
    python -m harness.controlplane_cli build
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .controlplane import ControlPlane
from .controlplane_binaries import ControlPlaneError, ensure_binaries
from .process import pid_alive

DEFAULT_STATE_DIR = Path("/tmp/tritonpipeline-cluster")


def _read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _running(state_dir: Path) -> dict[str, int]:
    state = _read_state(state_dir) or {}
    return {
        name: pid
        for name, pid in state.get("pids", {}).items()
        if pid_alive(pid, state.get("binaries", {}).get(name, name))
    }


def cmd_up(state_dir: Path) -> int:
    running = _running(state_dir)
    if running:
        state = _read_state(state_dir) or {}
        print(f"control plane already running ({state.get('url')}, pids {running})")
        print(f"kubeconfig: {state.get('kubeconfig')}")
        print(f"export KUBECONFIG={state.get('kubeconfig')}")
        return 0
    try:
        binaries = ensure_binaries()
    except ControlPlaneError as err:
        print(f"cannot start the control plane: {err}", file=sys.stderr)
        return 1
    shutil.rmtree(state_dir, ignore_errors=True)
    cp = ControlPlane(state_dir, binaries, detach=True)
    try:
        cp.start()
    except ControlPlaneError as err:
        print(str(err), file=sys.stderr)
        return 1
    took = f"{cp.startup_seconds:.1f}s"
    print(f"kube-apiserver {cp.version} ready at {cp.url} in {took} (etcd {binaries.etcd_version})")
    print(f"pids: {cp.pids()}; logs: {cp.etcd_log}, {cp.apiserver_log}")
    print(f"kubeconfig: {cp.kubeconfig}")
    print(f"export KUBECONFIG={cp.kubeconfig}")
    return 0


def cmd_down(state_dir: Path) -> int:
    state = _read_state(state_dir)
    if state is None:
        print(f"no control plane state in {state_dir}")
        return 0
    running = _running(state_dir)
    # apiserver first: it shuts down gracefully only while etcd still answers
    for name in ("kube-apiserver", "etcd"):
        if name not in running:
            continue
        os.kill(running[name], signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and name in _running(state_dir):
            time.sleep(0.1)
        if name in _running(state_dir):
            print(f"{name} (pid {running[name]}) did not stop on SIGTERM in 20s; killing")
            os.kill(running[name], signal.SIGKILL)
    shutil.rmtree(state_dir, ignore_errors=True)
    print(f"control plane stopped ({', '.join(running) or 'nothing was running'}); removed {state_dir}")
    return 0


def cmd_status(state_dir: Path) -> int:
    state = _read_state(state_dir)
    running = _running(state_dir)
    if not state or not running:
        print("control plane not running")
        return 1
    print(f"running: {running} at {state['url']}\nexport KUBECONFIG={state['kubeconfig']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status", "build"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_STATE_DIR, help="state directory (%(default)s)")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            print(ensure_binaries())
        except ControlPlaneError as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    return {"up": cmd_up, "down": cmd_down, "status": cmd_status}[args.command](args.dir.resolve())


if __name__ == "__main__":
    sys.exit(main())
