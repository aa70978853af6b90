"""`tritonpipeline assemble`: what the pods' init container runs, the model repository built from the
generated ConfigMaps and the model source."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import EXIT_OK

NAME = "assemble"
EXAMPLES = (
    (
        "tritonpipeline assemble --generated /tp/generated --source s3://models/triton --out /tp/repository",
        "what the pods' init container runs: the model repository from the ConfigMaps and the source",
    ),
)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        NAME, help="(init container) build the model repository in a pod"
    )
    p.add_argument("--generated", required=True, metavar="DIR", help="the mounted generated ConfigMaps")
    p.add_argument("--source", required=True, help="mounted model source directory, or s3:// / gs:// URI")
    p.add_argument("--out", required=True, metavar="DIR", help="repository to create")
    return p


def execute(args: argparse.Namespace) -> int:
    """The init container: build the model repository from the ConfigMaps and the model source."""
    from ..local.assemble import assemble

    generated = assemble(Path(args.generated), args.source, Path(args.out))
    print(
        f"assembled {len(generated.files)} generated files and {len(generated.models)} model(s) into "
        f"{args.out} (repository {generated.digest[:12]})"
    )
    return EXIT_OK
