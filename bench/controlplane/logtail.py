"""When the operator says it reconciled a pipeline: its log followed as it is written, with the arrival
time of every outcome line (runtime/log_events.py: RECONCILE_DONE, RECONCILE_INVALID and RECONCILE_ERROR,
`reconcile <outcome> (generation N): ...` on the pipeline's logger, `[namespace/name]` in the line) and of
the start-up line (OPERATOR_STARTED)."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from .watch import wait_on
from .workload import now

OUTCOME = re.compile(
    r"\[(?P<ns>[^/\]\s]+)/(?P<name>[^\]\s]+)\] reconcile (?P<outcome>\w+) \(generation \d+\)"
)
STARTED = "tritonpipeline operator: watching"  # OPERATOR_STARTED
WEBHOOK_REGISTERED = re.compile(r"admission webhook \S+ registered")  # WEBHOOK_REGISTERED
# the webhook server's access line (aiohttp): the HTTP status it answered the apiserver with
WEBHOOK_ANSWER = re.compile(r'aiohttp\.access .*"POST /validate\S* HTTP/[\d.]+" (?P<status>\d{3}) ')
KOPF_RETRY = "failed; will retry"  # kopf's line when one of its own API requests failed


class LogTail:
    """Follows one operator log file from its current end (polled every `interval` s; lines are taken
    when complete). Records, per pipeline of `namespace`, the arrival time of its first outcome line, every
    outcome line's time and outcome, and when the start-up and webhook-registered lines arrived."""

    def __init__(self, log: Path, namespace: str, interval: float = 0.02) -> None:
        self.log = log
        self.namespace = namespace
        self.interval = interval
        self.cond = threading.Condition()
        self.first: dict[str, float] = {}  # pipeline -> arrival of its first outcome line
        self.outcomes: list[tuple[float, str, str]] = []  # (arrival, pipeline, outcome), every line
        self.started: float | None = None
        self.registered: float | None = None
        self.answers: list[tuple[float, str]] = []  # (arrival, HTTP status) of each webhook answer
        self.retries: list[float] = []  # arrivals of kopf's retry lines
        self._offset = log.stat().st_size if log.exists() else 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> LogTail:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        pending = b""
        while True:
            stopping = self._stop.is_set()
            try:
                with open(self.log, "rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except OSError:
                chunk = b""
            if chunk:
                self._offset += len(chunk)
                t = now()
                *lines, pending = (pending + chunk).split(b"\n")
                self._take([line.decode(errors="replace") for line in lines], t)
            if stopping:
                return
            self._stop.wait(self.interval)

    def _take(self, lines: list[str], t: float) -> None:
        with self.cond:
            for line in lines:
                m = OUTCOME.search(line)
                if m and m["ns"] == self.namespace:
                    self.first.setdefault(m["name"], t)
                    self.outcomes.append((t, m["name"], m["outcome"]))
                elif a := WEBHOOK_ANSWER.search(line):
                    self.answers.append((t, a["status"]))
                elif KOPF_RETRY in line:
                    self.retries.append(t)
                elif self.started is None and STARTED in line:
                    self.started = t
                elif self.registered is None and WEBHOOK_REGISTERED.search(line):
                    self.registered = t
            self.cond.notify_all()

    # -- queries (they take the lock) ------------------------------------------------------------------

    def reconciled(self, names: set[str]) -> int:
        """How many of `names` have an outcome line."""
        with self.cond:
            return sum(1 for name in names if name in self.first)

    def outcomes_between(self, t0: float, t1: float) -> Counter[str]:
        """Outcome lines that arrived in [t0, t1), by outcome."""
        with self.cond:
            return Counter(outcome for t, _, outcome in self.outcomes if t0 <= t < t1)

    def webhook_answers(self, t0: float, t1: float) -> Counter[str]:
        """The webhook's answers that arrived in [t0, t1), by HTTP status."""
        with self.cond:
            return Counter(status for t, status in self.answers if t0 <= t < t1)

    def retries_between(self, t0: float, t1: float) -> int:
        with self.cond:
            return sum(1 for t in self.retries if t0 <= t < t1)

    def last_outcome(self) -> float | None:
        with self.cond:
            return self.outcomes[-1][0] if self.outcomes else None

    def all_outcomes(self) -> Counter[str]:
        with self.cond:
            return Counter(outcome for _, _, outcome in self.outcomes)

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate` (called with the lock held) is true; False after `timeout` s."""
        return wait_on(self.cond, predicate, timeout)
