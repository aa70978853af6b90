"""What tests/unit/test_stream_leases.py and tests/component/test_stream_leases.py share."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from helpers import example
from tritonpipeline.render import autoscaling_objects


def run_test(path: Path) -> int:
    return subprocess.run(
        ["/bin/sh", "-c", autoscaling_objects.open_streams_test(str(path))], timeout=10
    ).returncode


# ------------------------------------------------------------------------------------- tritonserver


def stream_doc() -> dict[str, Any]:
    doc = example("streaming")
    doc["spec"]["routing"] = {"sessionAffinity": "Stream"}
    return doc
