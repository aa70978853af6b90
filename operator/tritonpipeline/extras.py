"""The optional parts of the package (pyproject.toml's extras) and the one-line error when one is missing.

The core (validate, render, graph, crd, manifests, assemble from pvc://) needs none of them."""

from __future__ import annotations

import importlib
from types import ModuleType

# extra -> (what it is for, the modules it provides that the code imports)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "operator": ("the Kubernetes operator", ("kopf", "kubernetes", "aiohttp", "prometheus_client")),
    "serve": ("a local tritonserver", ("pytriton", "numpy")),
    "client": ("the Triton client", ("tritonclient.http", "tritonclient.grpc", "numpy")),
    "s3": ("s3:// model repositories", ("boto3",)),
    "gcs": ("gs:// model repositories", ("google.cloud.storage",)),
}


class MissingExtra(ImportError):
    """A module of an extra is not installed; the message says which extra to install."""


def missing_message(extra: str, module: str, needed_by: str) -> str:
    return (
        f"{needed_by} needs the {extra!r} extra ({module} is not installed): "
        f"pip install 'tritonpipeline[{extra}]'"
    )


def need(extra: str, needed_by: str) -> None:
    """Import every module of `extra`, or raise MissingExtra naming the extra and `needed_by`."""
    for module in EXTRAS[extra][1]:
        load(module, extra, needed_by)


def load(module: str, extra: str, needed_by: str) -> ModuleType:
    """`import module`, or MissingExtra naming `extra` when it (or what it imports) is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtra(missing_message(extra, exc.name or module, needed_by)) from exc
