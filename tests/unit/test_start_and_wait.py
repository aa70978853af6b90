"""harness.process.start_and_wait, the one way the harness starts a server and waits for it: on small
Python processes (each well under a second)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from harness.process import end, start_and_wait


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def gone(pid: int) -> bool:
    """The process has ended (reaped, or a zombie no one waits for)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return status == "Z"


def test_it_returns_the_process_once_ready_says_so(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    code = f"import pathlib, time; time.sleep(0.3); pathlib.Path({str(flag)!r}).touch(); time.sleep(60)"
    proc = start_and_wait("server", python(code), flag.exists, log=tmp_path / "log", timeout=20)
    try:
        assert flag.exists() and proc.poll() is None
        assert os.getpgid(proc.pid) == proc.pid  # a session (and process group) of its own
    finally:
        end(proc, 5)


def test_a_process_that_exits_first_is_named_with_its_code_and_log_tail(tmp_path: Path) -> None:
    code = "import sys; print('listen tcp: address already in use', flush=True); sys.exit(3)"
    with pytest.raises(RuntimeError) as err:
        start_and_wait("etcd", python(code), lambda: False, log=tmp_path / "log", timeout=20)
    assert str(err.value).startswith("etcd exited (3):\n")
    assert "address already in use" in str(err.value)


def test_one_not_ready_in_time_is_ended_and_the_error_says_so(tmp_path: Path) -> None:
    class Refused(Exception):
        pass

    pid_file = tmp_path / "pid"
    code = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(Refused) as err:
        start_and_wait(
            "nginx",
            python(code),
            lambda: False,
            log=tmp_path / "log",
            timeout=2,
            tail=lambda: "the tail",
            not_ready="did not listen",
            error=Refused,
        )
    assert time.monotonic() - t0 < 10
    assert str(err.value) == "nginx did not listen within 2s:\nthe tail"
    assert gone(int(pid_file.read_text()))


def test_a_process_it_runs_alongside_that_dies_fails_the_start(tmp_path: Path) -> None:
    etcd = start_and_wait(
        "etcd", python("import time; time.sleep(0.5)"), lambda: True, log=tmp_path / "etcd", timeout=5
    )
    with pytest.raises(RuntimeError) as err:
        start_and_wait(
            "kube-apiserver",
            python("import time; time.sleep(60)"),
            lambda: False,
            log=tmp_path / "apiserver",
            timeout=30,
            alongside={"etcd": etcd},
        )
    assert str(err.value).startswith("etcd exited (0):")
