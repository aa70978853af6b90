"""go-containerregistry's registry (`crane registry serve`, in memory; crane built from Go modules by
e2e/build-gotool.sh): the real OCI registry `make release`'s publish test and `make e2e` push to."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from harness.process import end, start_and_wait

SERVING = re.compile(r"serving on port (\d+)")


@contextlib.contextmanager
def serve(crane: Path, workdir: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """A registry on `host`:`port` (0: a free port) for the block; yields HOST:PORT (IPv6 in brackets). Its
    log is workdir/registry.log; it is ended by its PID when the block ends."""
    log_path = workdir / "registry.log"
    where = f"[{host}]" if ":" in host else host

    def serving() -> re.Match[str] | None:
        return SERVING.search(log_path.read_text())

    proc = start_and_wait(
        "crane registry serve",
        [str(crane), "registry", "serve", "--address", f"{where}:{port}"],
        serving,
        log=log_path,
        timeout=20,
        tail=lambda: log_path.read_text()[-1000:],
        not_ready="did not start",
    )
    try:
        found = serving()
        assert found is not None
        yield f"{where}:{found.group(1)}"
    finally:
        end(proc, timeout=10)
