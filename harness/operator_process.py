"""The operator as a real subprocess (`tritonpipeline run`) with its log: started with local flags
(LocalOperator) or exactly as the chart's Deployment runs it (ChartOperator)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from tritonpipeline.local.tritonserver import free_port

from .paths import CLI

P = TypeVar("P", bound="OperatorProcess")


class OperatorProcess:
    """A `tritonpipeline run ...` subprocess with its log: start, SIGINT stop, SIGKILL, log text, and
    GET on its loopback endpoints."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self: P) -> P:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(2)  # SIGINT: kopf stops cleanly
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def lines(self) -> list[str]:
        """The non-empty lines of its log."""
        return [line for line in self.text().splitlines() if line.strip()]

    def __enter__(self: P) -> P:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    """Status and body of GET `url`; (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except OSError:
        return 0, ""


class LocalOperator(OperatorProcess):
    """`tritonpipeline run -n NAMESPACE [ARGS...]` with KUBECONFIG set and `env` added. With
    `endpoints`, its metrics/readiness and liveness endpoints listen on free loopback ports."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log: Path,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        endpoints: bool = False,
    ) -> None:
        command = [str(CLI), "run", "-n", namespace]
        self.metrics_port = self.liveness_port = 0
        if endpoints:
            self.metrics_port, self.liveness_port = free_port(), free_port()
            command += [
                "--metrics", f"http://127.0.0.1:{self.metrics_port}",
                "--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz",
            ]  # fmt: skip
        super().__init__([*command, *args], {**os.environ, "KUBECONFIG": str(kubeconfig), **(env or {})}, log)

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        """GET `path` on the metrics port (or `port`): status and body, (0, "") when nothing answers."""
        assert self.metrics_port, "started without endpoints"
        return http_get(f"http://127.0.0.1:{port or self.metrics_port}{path}")

    def healthz(self) -> int:
        return self.get("/healthz", self.liveness_port)[0]

    def wait_ready(self, timeout: float = 60) -> None:
        """Until /readyz answers 200; else AssertionError with what it last answered (or that the process
        ended, and how) and the end of its log: PortTaken where it ended because one of its ports was
        taken between free_port() and its bind (an outgoing connection may take any free port)."""
        began = time.monotonic()
        answer: tuple[int, str] = (0, "")
        while time.monotonic() - began < timeout and self.alive():
            answer = self.get("/readyz")
            if answer[0] == 200:
                return
            time.sleep(0.1)
        state = "running" if self.alive() else f"exited with {self.proc.returncode if self.proc else None}"
        said = f"{answer[0]} {answer[1].strip()!r}" if answer[0] else "nothing (connection refused)"
        log = self.text()
        error = PortTaken if not self.alive() and ADDRESS_IN_USE in log.lower() else AssertionError
        raise error(
            f"the operator's /readyz did not answer 200 after {time.monotonic() - began:.0f}s (of "
            f"{timeout:.0f}): last answer {said}; the process is {state}; its log ends:\n{log[-4000:]}"
        )


ADDRESS_IN_USE = "address already in use"  # the operator's error when a port it should listen on is taken


class PortTaken(AssertionError):
    """The operator ended at start because a port it was given was taken meanwhile: start another."""


class ChartOperator(OperatorProcess):
    """The operator container of the rendered Deployment, run here as a subprocess: its command (the
    `tritonpipeline` entry point of this venv), its flags (`-n` per watched namespace), its env, and the
    chart's ServiceAccount token as its only credential. The liveness, metrics and admission webhook
    endpoints move to free loopback ports of the family the chart binds (0.0.0.0:8080, :8081 and :9443, or
    [::]:..., are a pod's addresses: 127.0.0.1 or [::1] here); the apiserver calls the webhook at its
    loopback URL instead of through the Service (no kube-proxy here)."""

    ANY_TO_LOOPBACK = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}

    def __init__(self, deployment: dict[str, Any], kubeconfig: Path, log: Path) -> None:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        command = list(container["command"])
        assert command[0] == "tritonpipeline", command
        liveness = command.index("--liveness") + 1
        url = command[liveness]
        bound = url.removeprefix("http://").rpartition(":")[0]
        assert bound in self.ANY_TO_LOOPBACK and url.endswith("/healthz"), url
        self.loopback = self.ANY_TO_LOOPBACK[bound]
        self.port = free_port()
        command[liveness] = f"http://{self.loopback}:{self.port}/healthz"
        self.metrics_port = free_port()
        metrics = command.index("--metrics") + 1
        assert command[metrics].startswith(f"http://{bound}:"), command[metrics]
        command[metrics] = f"http://{self.loopback}:{self.metrics_port}"
        command[0] = str(CLI)
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        self.webhook_port: int | None = None
        if "TRITONPIPELINE_WEBHOOK_LISTEN" in env:
            assert env["TRITONPIPELINE_WEBHOOK_LISTEN"].startswith(f"{bound}:"), env
            self.webhook_port = free_port()
            env["TRITONPIPELINE_WEBHOOK_LISTEN"] = f"{self.loopback}:{self.webhook_port}"
            env.pop("TRITONPIPELINE_WEBHOOK_SERVICE")
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TRITONPIPELINE_", "KUBE"))}
        tmp = os.environ.get("TMPDIR", "/tmp")
        super().__init__(command, {**base, **env, "KUBECONFIG": str(kubeconfig), "TMPDIR": tmp}, log)
        self.container_env = env

    def healthz(self, url: str | None = None) -> int:
        """The status of GET `url` (default: the liveness endpoint); 0 when nothing answers."""
        return http_get(url or f"http://{self.loopback}:{self.port}/healthz", timeout=2)[0]

    def readyz(self) -> int:
        return self.healthz(f"http://{self.loopback}:{self.metrics_port}/readyz")
