"""What tests/unit/test_tutorial.py and tests/component/test_tutorial.py share."""

from __future__ import annotations

from helpers import ROOT

PAGE = ROOT / "docs" / "getting-started" / "cluster.md"
