"""The init container's job: build the model repository from the operator's ConfigMaps and the source.

Volume sources (pvc://) are mounted and linked, not copied; s3:// and gs:// sources are downloaded
(only the declared models) with the credentials, endpoint and CA bundle the pod gets from
spec.modelRepository (render/manifests.py renders them as variables and files). The generated configs
are laid over the result.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Protocol

from .. import extras
from ..errors import Problem, SpecError, clip, quote
from ..render.manifests import S3_ADDRESSING_ENV
from ..render.packing import Unpacked, unpack
from .native_router import NativeRouterUnavailable, fill_slots
from .repository import write_repository


def read_generated_dir(directory: Path) -> Unpacked:
    """The generated files from the projected volume of the ConfigMaps (one file per key)."""
    return unpack({p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()})


class _Store(Protocol):
    def keys(self, prefix: str) -> Iterator[str]: ...
    def fetch(self, key: str, target: Path) -> None: ...


class _S3:
    """An S3 bucket through boto3: endpoint, region and CA bundle come from the variables boto3 reads
    (AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_CA_BUNDLE: render/manifests.py sets them), credentials from
    AWS_* variables or the pod's identity."""

    def __init__(self, bucket: str) -> None:
        boto3 = extras.load("boto3", "s3", "an s3:// model repository")
        config = extras.load("botocore.config", "s3", "an s3:// model repository")
        style = os.environ.get(S3_ADDRESSING_ENV)
        options = {"s3": {"addressing_style": style}} if style else {}
        region = os.environ.get("AWS_REGION") or None  # older botocore reads only AWS_DEFAULT_REGION
        self.client = boto3.client("s3", region_name=region, config=config.Config(**options))
        self.bucket = bucket

    def keys(self, prefix: str) -> Iterator[str]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                yield obj["Key"]

    def fetch(self, key: str, target: Path) -> None:
        self.client.download_file(self.bucket, key, str(target))


class _GCS:
    """A Cloud Storage bucket: credentials from GOOGLE_APPLICATION_CREDENTIALS (a mounted key file) or
    the pod's identity (Workload Identity)."""

    def __init__(self, bucket: str) -> None:
        storage = extras.load("google.cloud.storage", "gcs", "a gs:// model repository")
        self.bucket = storage.Client().bucket(bucket)

    def keys(self, prefix: str) -> Iterator[str]:
        for blob in self.bucket.list_blobs(prefix=prefix):
            yield blob.name

    def fetch(self, key: str, target: Path) -> None:
        self.bucket.blob(key).download_to_filename(str(target))


def _store_errors(scheme: str) -> tuple[type[BaseException], ...]:
    """The exceptions of a store's SDK that mean "cannot read the bucket" (credentials, network, TLS)."""
    if scheme == "s3":
        import botocore.exceptions as boto

        return (boto.BotoCoreError, boto.ClientError)
    import google.api_core.exceptions as api
    import google.auth.exceptions as auth
    import requests

    return (api.GoogleAPIError, auth.GoogleAuthError, requests.RequestException)


def _describe(exc: BaseException) -> str:
    """One line for an SDK error: S3's error code and message, else the exception's text."""
    error = getattr(exc, "response", None)
    if isinstance(error, dict) and "Error" in error:
        code, message = error["Error"].get("Code", ""), error["Error"].get("Message", "")
        return clip(f"{code}: {message}".strip(": "), 300)
    return clip(" ".join(str(exc).split()) or type(exc).__name__, 300)


def _target(dest: Path, model: str, relative: str, key: str) -> Path:
    """Where the object `key` (`relative` below its model's prefix; empty for the model's own folder
    marker) goes; refuses keys that climb out."""
    parts = PurePosixPath(relative).parts
    if any(p in ("..", ".") for p in parts):
        raise SpecError([Problem("spec.modelRepository.uri", f"refusing the object key {quote(key)}")])
    return dest.joinpath(model, *parts)


def download(uri: str, models: tuple[str, ...], dest: Path) -> Path:
    """Fetch uri/<model>/ for every declared model into dest; returns dest. Keys ending in `/` are the
    "folder" objects consoles and some tools create: directories, not files."""
    scheme, _, rest = uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if scheme not in ("s3", "gs"):
        raise SpecError([Problem("spec.modelRepository.uri", f"cannot download {uri!r}")])
    dest.mkdir(parents=True, exist_ok=True)
    store: _Store = _S3(bucket) if scheme == "s3" else _GCS(bucket)
    try:
        for model in models:
            model_prefix = f"{prefix}/{model}/" if prefix else f"{model}/"
            for key in store.keys(model_prefix):
                target = _target(dest, model, key[len(model_prefix) :], key)
                if key.endswith("/"):
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                store.fetch(key, target)
    except _store_errors(scheme) as exc:
        raise SpecError(
            [Problem("spec.modelRepository.uri", f"cannot read {quote(uri)}: {_describe(exc)}")]
        ) from exc
    return dest


def assemble(generated_dir: Path, source: str, out: Path) -> Unpacked:
    """Build `out` from the generated ConfigMap files and the model source (a path or a cloud URI)."""
    generated = read_generated_dir(generated_dir)
    root = download(source, generated.models, out.parent / "source") if "://" in source else Path(source)
    missing = [m for m in generated.models if not (root / m).is_dir()]
    if missing:
        raise SpecError(
            [
                Problem("spec.models", f"model directory {m!r} not found in the source {source!r}")
                for m in missing
            ]
        )
    try:  # the native routers' library, from this image, beside each of them
        generated = replace(generated, files=fill_slots(generated.files))
    except NativeRouterUnavailable as exc:
        raise SpecError([Problem("spec.server.router", str(exc))]) from None
    write_repository(generated, out, root, force=True)
    return generated
