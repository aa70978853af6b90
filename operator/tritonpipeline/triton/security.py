"""Triton's administrative APIs behind a key (pure data and functions, shared by the operator, `serve`
and the client helper).

tritonserver restricts API groups with `--http-restricted-api=APIS:KEY=VALUE` and
`--grpc-restricted-protocol=APIS:KEY=VALUE`: a restricted request must carry the header KEY with VALUE
(HTTP), or the metadata `triton-grpc-protocol-KEY` (gRPC, which tritonserver prefixes). A request without
it gets HTTP 403 / gRPC UNAVAILABLE. Inference, health and metadata stay open.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

# Restricted by default. statistics too: it is read-only, but it tells anyone who can reach the port
# which models exist and how much traffic each gets, and no inference client needs it; the numbers
# monitoring needs are on the metrics port, which is not part of these APIs.
ADMIN_APIS = ("logging", "trace", "shared-memory", "model-repository", "model-config", "statistics")
OPEN_APIS = ("inference", "health", "metadata")
ADMIN_HEADER = "admin-key"
GRPC_PREFIX = "triton-grpc-protocol-"  # tritonserver looks for this prefix + the key in gRPC metadata
SECRET_KEY = "admin-key"  # the data key of the generated Secret
KEY_ENV = "TRITON_ADMIN_KEY"  # the container's env var that carries the key into the args
KEY_FILE = "admin-key"  # `serve` writes the key here (mode 0600) in its work directory
OPTIONS = ("http-restricted-api", "grpc-restricted-protocol")


def new_key() -> str:
    """A fresh random key (256 bits, hex: no ':' or '=' that tritonserver's option parser would split on)."""
    return secrets.token_hex(32)


def restricted_args(value: str, apis: tuple[str, ...] = ADMIN_APIS) -> list[str]:
    """tritonserver flags that restrict `apis` on HTTP and gRPC to requests carrying `value`."""
    groups = ",".join(apis)
    return [f"--{option}={groups}:{ADMIN_HEADER}={value}" for option in OPTIONS]


def header_name(protocol: str) -> str:
    """The header (HTTP) or metadata key (gRPC) that carries the key."""
    return f"{GRPC_PREFIX}{ADMIN_HEADER}" if protocol == "grpc" else ADMIN_HEADER


def headers(key: str, protocol: str = "http") -> dict[str, str]:
    return {header_name(protocol): key}


def write_key(directory: Path, key: str) -> Path:
    """Write the key to DIRECTORY/admin-key, readable by its owner only (created 0600, never replaced)."""
    path = directory / KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key)
    return path


def read_key(path: str | Path) -> str:
    """The key stored in a file (such as the one `serve` writes), without surrounding blanks."""
    return Path(path).read_text().strip()
