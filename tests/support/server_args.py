"""What tests/unit/test_server_args.py and tests/component/test_server_args.py share."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from helpers import ROOT


def doc_with(args: list[str]) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "fanout.yaml").read_text()))
    doc["spec"]["server"]["args"] = args
    return doc
