"""Real Prometheus (the Debian package) as a subprocess with its own config and data directory, scraping
local tritonservers, queried through its HTTP API (/api/v1/query).

Targets carry the labels Kubernetes service discovery would give them (`namespace`, `pod`), so the
operator's queries, which select a pipeline's pods by those labels, run unchanged.

    with Prometheus(tmp, [("127.0.0.1:8002", {"namespace": "ml", "pod": "vision-5d8f-x2x9z"})]) as prom:
        prom.query('sum(nv_inference_pending_request_count{namespace="ml"})')
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tritonpipeline.local.tritonserver import free_port

from .process import end, missing_system_binary, start_and_wait, system_binary


class PrometheusUnavailable(RuntimeError):
    """prometheus is not installed: tests skip with this message."""


def prometheus_binary() -> str | None:
    return system_binary("prometheus", "/usr/bin/prometheus")


def missing_prometheus() -> str | None:
    """Why prometheus cannot run here (the exact skip reason), or None."""
    return missing_system_binary("prometheus", "/usr/bin/prometheus", "prometheus")


def promtool_binary() -> str | None:
    """promtool, Prometheus's rule checker and rule unit tester (Debian's prometheus package ships it)."""
    return system_binary("promtool", "/usr/bin/promtool")


def missing_promtool() -> str | None:
    """Why promtool cannot run here (the exact skip reason), or None."""
    return missing_system_binary("promtool", "/usr/bin/promtool", "prometheus")


class Prometheus:
    def __init__(
        self,
        workdir: Path,
        targets: Sequence[tuple[str, Mapping[str, str]]],
        scrape_interval: str = "1s",
        metrics_path: str = "/metrics",
    ) -> None:
        self.workdir = Path(workdir)
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.metrics_path = metrics_path
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "scrape_configs": [
                {
                    "job_name": "tritonserver",
                    "metrics_path": self.metrics_path,
                    "scrape_timeout": self.scrape_interval,
                    "static_configs": [
                        {"targets": [t], "labels": dict(labels)} for t, labels in self.targets
                    ],
                }
            ],
        }

    def start(self, timeout: float = 30.0) -> Prometheus:
        binary = prometheus_binary()
        if binary is None:
            raise PrometheusUnavailable(missing_prometheus() or "prometheus missing")
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "prometheus.yml"
        conf.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        self.proc = start_and_wait(
            "prometheus",
            [
                binary,
                f"--config.file={conf}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                "--storage.tsdb.retention.time=1h",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            self._ready,
            log=self.workdir / "prometheus.log",
            timeout=timeout,
            tail=self.logs,
        )
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def logs(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query through /api/v1/query; the result vector (raises on a PromQL error)."""
        form = {"query": expr}
        if at is not None:
            form["time"] = f"{at:.3f}"
        body = urllib.parse.urlencode(form).encode()
        req = urllib.request.Request(f"{self.url}/api/v1/query", data=body, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"query refused ({exc.code}): {exc.read()[:500]!r}\n{expr}") from None
        if answer.get("status") != "success":
            raise RuntimeError(f"query failed: {answer}\n{expr}")
        return list(answer["data"]["result"])

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The single value of a one-series result (None when the result is empty)."""
        result = self.query(expr, at)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError(f"expected one series, got {len(result)}: {result}\n{expr}")
        return float(result[0]["value"][1])

    def stop(self, timeout: float = 15.0) -> None:
        end(self.proc, timeout)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
