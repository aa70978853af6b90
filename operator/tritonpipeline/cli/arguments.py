"""The argument types and options the commands share: each type refuses a bad value as a usage error that
says what was expected."""

from __future__ import annotations

import argparse
import ipaddress
import math
import urllib.parse

from ..errors import quote

FILE_HELP = (
    "a YAML file of TritonPipelines; - reads standard input (a relative modelRepository.uri: from here)"
)


def add_file(p: argparse.ArgumentParser) -> None:
    """The pipeline file a command reads."""
    p.add_argument("file", metavar="FILE", help=FILE_HELP)


def add_models(p: argparse.ArgumentParser) -> None:
    """--models: where a command finds the model files."""
    p.add_argument("--models", metavar="DIR", help="model files root (overrides a local modelRepository.uri)")


def add_name(p: argparse.ArgumentParser, what: str = "which TritonPipeline") -> None:
    """--name: one pipeline of a file that holds several."""
    p.add_argument("--name", help=f"{what}, when the file holds several")


def output_path(text: str) -> str:
    """argparse type of an output path: not empty (`-o ""` rendered into the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty one")
    return text


def seconds(text: str) -> float:
    """argparse type of a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {quote(text)}")
    return value


def whole_seconds(text: str) -> int:
    """argparse type of a whole number of seconds, 0 or more."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of seconds, 0 or more, got {quote(text)}")
    return int(text)


def ip_address(text: str) -> str:
    """argparse type of an address to bind: an IP literal (tritonserver's HTTP and metrics services take
    no host names: `localhost` bound 255.255.255.255, and serve waited out its timeout)."""
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an IP address such as 127.0.0.1, 0.0.0.0 or ::1, got {quote(text)} (tritonserver "
            "takes no host names)"
        ) from None


def port(text: str) -> int:
    """argparse type of a TCP port: an integer 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {quote(text)}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {value}")
    return value


def endpoint_url(text: str) -> str:
    """argparse type of an endpoint to serve on: http://HOST:PORT (a path is kept)."""
    parts = urllib.parse.urlsplit(text)
    try:
        number = parts.port
    except ValueError:
        number = None
    if parts.scheme != "http" or not parts.hostname or number is None or not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT (port 1-65535), got {quote(text)}")
    return text
