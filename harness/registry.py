"""go-containerregistry's registry (`crane registry serve`, in memory; crane built from Go modules by
e2e/build-gotool.sh): the real OCI registry `make release`'s publish test and `make e2e` push to."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from harness.process import end

SERVING = re.compile(r"serving on port (\d+)")


@contextlib.contextmanager
def serve(crane: Path, workdir: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """A registry on `host`:`port` (0: a free port) for the block; yields HOST:PORT (IPv6 in brackets). Its
    log is workdir/registry.log; it is ended by its PID when the block ends."""
    log_path = workdir / "registry.log"
    where = f"[{host}]" if ":" in host else host
    with log_path.open("w+") as log:
        proc = subprocess.Popen(
            [str(crane), "registry", "serve", "--address", f"{where}:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not (found := SERVING.search(log_path.read_text())):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"crane registry serve did not start: {log_path.read_text()[-1000:]}")
                time.sleep(0.1)
            yield f"{where}:{found.group(1)}"
        finally:
            end(proc, timeout=10)
