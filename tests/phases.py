"""Wall time per test group, printed at the end of the run and added to the phase log of tools/phase.sh.

A test's group is the heaviest real component it starts (its marker, pyproject.toml): `kind` (a kind
cluster), `node` (real pods), then `apiserver`, `helm`, `tritonserver`, the smaller servers, `cli`; a test
with none is `pure`. Its time is setup + call + teardown, so a session fixture (the control plane)
counts in the group of the test that started it. The slowest test files follow. With
TRITONPIPELINE_PHASE_LOG set (.ci/run), each group is appended there as `pytest/GROUP`.
"""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

GROUP_ORDER = (
    "kind",
    "node",
    "apiserver",
    "helm",
    "tritonserver",
    "minio",
    "gcsserver",
    "nginx",
    "prometheus",
    "haproxy",
    "linters",
    "image",
    "cli",
)
PHASE_LOG_ENV = "TRITONPIPELINE_PHASE_LOG"
PHASE_SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "phase.sh"

_seconds: dict[str, float] = defaultdict(float)
_tests: dict[str, set[str]] = defaultdict(set)
_groups: dict[str, str] = {}
_files: dict[str, float] = defaultdict(float)
SLOWEST_FILES = 15  # the test files listed by wall time (where a cold CI run's minutes go)


def group_of(markers: set[str]) -> str:
    return next((name for name in GROUP_ORDER if name in markers), "pure")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        _groups[item.nodeid] = group_of({mark.name for mark in item.iter_markers()})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    group = _groups.get(report.nodeid, "pure")
    _seconds[group] += report.duration
    _tests[group].add(report.nodeid)
    _files[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    order = [g for g in (*GROUP_ORDER, "pure") if g in _seconds]
    order.sort(key=lambda g: -_seconds[g])
    terminalreporter.section("time per test group")
    for group in order:
        terminalreporter.write_line(f"{group:<14} {_seconds[group]:7.0f}s  {len(_tests[group]):5d} tests")
    terminalreporter.section(f"the {SLOWEST_FILES} slowest test files")
    for path, seconds in sorted(_files.items(), key=lambda kv: -kv[1])[:SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:7.0f}s  {path}")
    log = os.environ.get(PHASE_LOG_ENV)
    if not log:
        return
    with open(log, "a", encoding="utf-8") as out:
        for group in order:
            out.write(f"pytest/{group}\t{_seconds[group]:.0f}\t{len(_tests[group])} tests\n")
    # every phase so far (the builds before pytest, then these groups), ahead of pytest's closing line
    table = subprocess.run(["bash", str(PHASE_SCRIPT), "--table", log], capture_output=True, text=True)
    terminalreporter.section("phases")
    terminalreporter.write(table.stdout)
