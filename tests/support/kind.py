"""What tests/unit/test_kind.py and tests/cluster/test_kind.py share: running `make e2e` so that a Ctrl-C
waits for its clean-up."""

from __future__ import annotations

import signal
import subprocess

from helpers import ROOT


def run_to_its_clean_up(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`cmd` run to its end. On Ctrl-C (the run, in pytest's process group, gets the SIGINT too) or a
    timeout (SIGINT sent), the run is waited for while it cleans up: subprocess.run killed it a quarter
    second after a Ctrl-C, and a `make test` interrupted in its kind tests left the cluster, its dockerd and
    the host's sysctls as they were."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except (
        KeyboardInterrupt
    ):  # it got the SIGINT too (a second one before its clean-up began would stop that)
        proc.communicate(timeout=CLEAN_UP_SECONDS)
        raise
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=CLEAN_UP_SECONDS)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


CLEAN_UP_SECONDS = 600  # deleting the cluster and stopping its engine on this machine takes about a minute
