"""CPU and memory of the processes under test, read from /proc; the operator subprocess sampled per phase."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from pathlib import Path

from harness.operator_process import LocalOperator


def proc_stat(pid: int) -> dict[str, float]:
    """CPU seconds (user+system, all threads) and current/peak RSS in MB of a live process."""
    out = {"cpu_s": float("nan"), "rss_mb": float("nan"), "hwm_mb": float("nan")}
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) * 1024 / 1e6
            elif line.startswith("VmHWM:"):
                out["hwm_mb"] = int(line.split()[1]) * 1024 / 1e6
    except (OSError, IndexError, ValueError):
        pass
    return out


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class SampledOperator(LocalOperator):
    """`tritonpipeline run -n NS` as a subprocess; samples its VmRSS, open sockets (connections to the
    apiserver) and threads every 100 ms, per phase."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, env: dict[str, str]) -> None:
        super().__init__(kubeconfig, namespace, log, env=env)
        self.rss_max_mb = 0.0
        self.rss_samples = 0
        self._phase_max: dict[str, dict[str, float]] = {}
        self.phase = "startup"
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> SampledOperator:
        super().start()
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set() and self.proc is not None and self.proc.poll() is None:
            rss = proc_stat(self.pid)["rss_mb"]
            if rss == rss:  # not NaN
                self.rss_samples += 1
                self.rss_max_mb = max(self.rss_max_mb, rss)
                sample = {"rss_mb": rss, **self._fds_threads()}
                peak = self._phase_max.setdefault(self.phase, {})
                for key, value in sample.items():
                    peak[key] = max(peak.get(key, 0.0), value)
            self._stop.wait(0.1)

    def _fds_threads(self) -> dict[str, float]:
        out: dict[str, float] = {}
        with contextlib.suppress(OSError):
            fds = os.listdir(f"/proc/{self.pid}/fd")
            out["sockets"] = sum(
                1 for fd in fds if os.readlink(f"/proc/{self.pid}/fd/{fd}").startswith("socket:")
            )
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("Threads:"):
                    out["threads"] = int(line.split()[1])
        return out

    def phase_peaks(self) -> dict[str, dict[str, float]]:
        """Per phase: max VmRSS (MB), max open sockets, max threads."""
        return {phase: {k: round(v, 1) for k, v in peak.items()} for phase, peak in self._phase_max.items()}

    def stop(self) -> int | None:
        self._stop.set()
        return super().stop()
