"""Grafana's dashboard schema, as Grafana's own npm packages ship it, checking a dashboard's JSON.

Grafana publishes its dashboard schema (the `Dashboard` kind, written in CUE in grafana/grafana) as
generated TypeScript types: @grafana/schema holds the dashboard model and each core panel's options and
field config; @grafana/grafana-foundation-sdk (Grafana's "cog" output of the same schemas) holds the
Prometheus query. No JSON Schema of the dashboard is published on npm or PyPI, so the check is the
TypeScript compiler's: the dashboard's JSON is assigned, as an object literal, to those types (string
enums read as their values, as JSON writes them), and `tsc --strict` reports every missing field, unknown
field (excess property checks) and wrong value with its path.

The three packages are pinned in tools/grafana-schema/package-lock.json and installed with `npm ci` into
the tools cache (`make grafana-schema`; the check installs them on first use), keyed by the lock's
digest.

    python -m harness.grafana_schema --install      # what `make grafana-schema` runs
    python -m harness.grafana_schema FILE.json      # check a dashboard; exit 1 with tsc's errors
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .paths import ROOT, cache_root

PACKAGE = ROOT / "tools" / "grafana-schema"
SOURCES = ("package.json", "package-lock.json")
# Grafana's types the check reads (a TypeScript module; the check appends the dashboard to it)
BOARD_TYPES = PACKAGE / "board.ts"
PANEL_TYPES = ("timeseries", "stat", "row")  # the kinds board.ts types; another is refused by the check


class GrafanaSchemaUnavailable(RuntimeError):
    """npm is missing or the install failed: tests skip with this message."""


def missing() -> str | None:
    """Why the schema cannot be installed here (the skip reason), or None."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        return "npm or node is missing (Debian packages npm, nodejs): the Grafana schema check needs both"
    return None


def install_dir() -> Path:
    digest = hashlib.sha256(b"".join((PACKAGE / name).read_bytes() for name in SOURCES)).hexdigest()[:12]
    return cache_root() / "grafana-schema" / digest


def install(log: Any = sys.stdout) -> Path:
    """The pinned packages under the tools cache (`npm ci` from the lock, no install scripts), installed on
    first use; a half-made install is made again."""
    if reason := missing():
        raise GrafanaSchemaUnavailable(reason)
    where = install_dir()
    if (where / ".installed").exists():
        return where
    print(f">> installing the Grafana schema packages (npm ci) into {where}", file=log, flush=True)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    for name in SOURCES:
        shutil.copy(PACKAGE / name, where / name)
    proc = subprocess.run(
        ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=where, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise GrafanaSchemaUnavailable(
            f"npm ci in {where} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    (where / ".installed").touch()
    return where


def versions(where: Path | None = None) -> dict[str, str]:
    """The installed packages and their versions (what the check ran against)."""
    lock = json.loads(((where or install_dir()) / "package-lock.json").read_text())
    return {
        name.removeprefix("node_modules/"): entry["version"]
        for name, entry in lock["packages"].items()
        if name.startswith("node_modules/")
    }


def check(board: dict[str, Any], log: Any = sys.stdout) -> list[str]:
    """tsc's errors for `board` against Grafana's types ([] when it conforms)."""
    where = install(log)
    unknown = sorted(
        {p.get("type", "?") for p in board.get("panels", []) if p.get("type") not in PANEL_TYPES}
    )
    if unknown:
        return [f"panel type(s) {', '.join(unknown)}: the check types only {', '.join(PANEL_TYPES)}"]
    with tempfile.TemporaryDirectory(dir=where, prefix="check-") as tmp:  # inside: node_modules resolves
        source = Path(tmp) / "dashboard.ts"
        source.write_text(
            f"{BOARD_TYPES.read_text()}\nexport const dashboard: Board = {json.dumps(board, indent=2)};\n"
        )
        tsc = where / "node_modules" / "typescript" / "bin" / "tsc"
        proc = subprocess.run(
            ["node", str(tsc), "--noEmit", "--strict", "--skipLibCheck", "--target", "es2022",
             "--module", "esnext", "--moduleResolution", "bundler", "--pretty", "false", str(source)],
            cwd=tmp, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    if proc.returncode == 0:
        return []
    return [line.replace(str(source), "dashboard") for line in proc.stdout.splitlines() if line.strip()] or [
        proc.stderr.strip()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dashboard", nargs="?", type=Path, help="a dashboard JSON file to check")
    parser.add_argument("--install", action="store_true", help="install the pinned packages and exit")
    parser.add_argument("--if-npm", action="store_true", help="without npm, say so and exit 0")
    args = parser.parse_args(argv)
    if args.if_npm and (reason := missing()):
        print(f">> {reason}: the Grafana schema check will skip")
        return 0
    try:
        where = install()
        if args.install:
            pins = ", ".join(f"{name} {version}" for name, version in versions(where).items())
            print(f">> Grafana schema packages in {where}: {pins}")
            return 0
        if args.dashboard is None:
            parser.error("give a dashboard file or --install")
        errors = check(json.loads(args.dashboard.read_text()))
    except GrafanaSchemaUnavailable as exc:
        print(f"grafana-schema: {exc}", file=sys.stderr)
        return 2
    for line in errors:
        print(line)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
