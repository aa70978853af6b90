"""helm (built from Go modules by e2e/build-gotool.sh) with a private home, and the chart's rendered
documents.

    helm = Helm(ensure_tool("helm"), kubeconfig=cp.kubeconfig, home=tmp)
    docs = helm.template("rel", "ops", values=[CHART / "ci" / "namespaced-values.yaml"])
    helm.install("rel", "ops")
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .gotools import ToolError
from .paths import ROOT

CHART = ROOT / "charts" / "triton-pipeline"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


class Helm:
    """The real helm binary with its own config/cache/data directories (nothing under ~ is touched)."""

    def __init__(self, binary: Path, home: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        home.mkdir(parents=True, exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        if kubeconfig is not None:
            self.env["KUBECONFIG"] = str(kubeconfig)

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise ToolError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    @staticmethod
    def _values(values: Sequence[Path | str] = (), set_values: Sequence[str] = ()) -> list[str]:
        args: list[str] = []
        for v in values:
            args += ["-f", str(v)]
        for s in set_values:
            args += ["--set", s]
        return args

    def lint(self, values: Sequence[Path | str] = (), set_values: Sequence[str] = ()) -> str:
        return self.run("lint", "--strict", str(CHART), *self._values(values, set_values)).stdout

    def template(
        self,
        release: str,
        namespace: str,
        values: Sequence[Path | str] = (),
        set_values: Sequence[str] = (),
        check: bool = True,
        api_versions: Sequence[str] = (),
        tests: bool = False,
    ) -> list[dict[str, Any]]:
        """The chart's objects as `helm install` creates them; `api_versions` (GROUP/VERSION/KIND): what helm
        takes the cluster to serve; `tests`: also the objects of `helm test` (templates/tests/, hooks)."""
        proc = self.run(
            "template", release, str(CHART), "--namespace", namespace, *self._values(values, set_values),
            *(arg for api in api_versions for arg in ("--api-versions", api)),
            *([] if tests else ["--skip-tests"]), check=check,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ToolError(proc.stderr)
        return [d for d in yaml.safe_load_all(proc.stdout) if d]

    def install(
        self, release: str, namespace: str, values: Sequence[Path | str] = (), set_values: Sequence[str] = ()
    ) -> str:
        return self.run(
            "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
            *self._values(values, set_values),
        ).stdout  # fmt: skip

    def uninstall(self, release: str, namespace: str) -> str:
        return self.run("uninstall", release, "--namespace", namespace, "--wait").stdout

    def status(self, release: str, namespace: str) -> dict[str, Any]:
        return json.loads(self.run("status", release, "--namespace", namespace, "-o", "json").stdout)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def deployment_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = by_kind(docs, "Deployment")
    return dep
