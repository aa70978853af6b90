"""tools/beside.sh (make test's side track beside the rest) and tools/phase.sh's table: exit statuses, the
wall-time total, and a signal reaching the background track's own clean-up."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BESIDE = ["bash", str(ROOT / "tools" / "beside.sh"), "bg"]
# a background track that reports its clean-up on SIGINT (as e2e.kind does) and otherwise runs long
CLEANS_UP = 'trap "echo cleaning; exit 3" INT; echo started; sleep 30; echo not interrupted'


def run(*args: str, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRITONPIPELINE_PHASE_LOG": str(log) if log else ""}
    return subprocess.run([*BESIDE, *args], capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.parametrize(
    ("background", "foreground", "status"),
    [("true", "true", 0), ("exit 4", "true", 4), ("true", "false", 1), ("exit 4", "false", 1)],
)
def test_the_status_is_the_foreground_s_when_it_failed_else_the_background_s(
    background: str, foreground: str, status: int
) -> None:
    assert run(background, foreground).returncode == status


def test_the_background_lines_are_prefixed_and_the_table_total_is_the_wall_time(tmp_path: Path) -> None:
    log = tmp_path / "phases"
    phase = f"bash {ROOT / 'tools' / 'phase.sh'}"
    done = run(
        f"{phase} bg/part sleep 2 && echo hello",
        "bash",
        str(ROOT / "tools" / "phase.sh"),
        "fg",
        "true",
        log=log,
    )
    assert done.returncode == 0, done.stderr
    assert "[bg] hello" in done.stdout and "[bg] >> phase bg/part: 2s" in done.stdout
    rows = dict(line.split("\t")[:2] for line in log.read_text().splitlines())
    assert rows["fg"] == "0" and rows["bg/part"] == "2" and int(rows["bg (waited)"]) >= 1
    total = next(line for line in done.stdout.splitlines() if line.split()[:1] == ["total"])
    # fg + the wait, not the background part beside them
    assert int(total.split()[1]) == int(rows["fg"]) + int(rows["bg (waited)"]) <= 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_reaches_the_background_track_s_clean_up(sig: signal.Signals) -> None:
    """SIGINT as a terminal sends it (to the foreground's process group), SIGTERM as a CI timeout does (to
    the script): either way the background track, in a process group of its own, gets SIGINT and cleans up,
    and both tracks have ended when the script exits."""
    # the foreground says when it runs: a signal before that reached its process while bash, starting it
    # in the background, still ignored SIGINT, and it slept on (seen under load: communicate timed out)
    foreground = ["bash", "-c", "echo foreground started; exec sleep 30"]
    proc = subprocess.Popen(
        [*BESIDE, CLEANS_UP, *foreground], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    # the three lines in any order: the background's own line may come before the script's (seen under load)
    lines = [proc.stdout.readline() for _ in range(3)]
    assert [line for line in lines if line.startswith(">> bg: started")], lines
    assert {"[bg] started\n", "foreground started\n"} <= set(lines), lines
    start = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out = proc.communicate(timeout=20)[0]
    assert proc.returncode == 130 and time.monotonic() - start < 10
    assert "[bg] cleaning" in out and "not interrupted" not in out, out
    left = subprocess.run(
        ["ps", "-o", "pid,stat,cmd", "--no-headers", "-g", str(proc.pid)], capture_output=True, text=True
    ).stdout
    assert left == "", f"processes left in the foreground's group: {left}"
