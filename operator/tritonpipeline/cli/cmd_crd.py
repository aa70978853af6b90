"""`tritonpipeline crd`: the TritonPipeline CustomResourceDefinition, to install without the chart."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import EXIT_OK

NAME = "crd"
EXAMPLES = (("tritonpipeline crd | kubectl apply --server-side -f -", "install the CRD without the chart"),)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        NAME, help="print the TritonPipeline CustomResourceDefinition"
    )
    return p


def execute(args: argparse.Namespace) -> int:
    from ..render.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return EXIT_OK
