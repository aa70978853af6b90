"""What tests/unit/test_status_live.py and tests/component/test_status_live.py share."""

from __future__ import annotations

from typing import Any

from helpers import example

# --- Stream routing: open sequences per pod (the generated open-streams gauge) ---------------------------


def stream_doc() -> dict[str, Any]:
    doc = example("streaming")
    doc["spec"]["routing"] = {"sessionAffinity": "Stream"}
    return doc
