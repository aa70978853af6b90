"""The init container's job: build the model repository from the operator's ConfigMaps and the source.

Volume sources (pvc://) are mounted and linked, not copied; s3:// and gs:// sources are downloaded
(only the declared models) with the credentials the pod gets from `secretRef`. The generated configs
are laid over the result.
"""

from __future__ import annotations

from pathlib import Path

from .errors import Problem, SpecError
from .kube.packing import Unpacked, unpack
from .repository import write_repository


def read_generated_dir(directory: Path) -> Unpacked:
    """The generated files from the projected volume of the ConfigMaps (one file per key)."""
    return unpack({p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()})


def download(uri: str, models: tuple[str, ...], dest: Path) -> Path:
    """Fetch uri/<model>/ for every declared model into dest; returns dest."""
    scheme, _, rest = uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    dest.mkdir(parents=True, exist_ok=True)
    if scheme == "s3":
        try:
            import boto3
        except ImportError as exc:
            raise SpecError(
                [Problem("spec.modelRepository.uri", "s3:// sources need boto3 in the image")]
            ) from exc
        client = boto3.client("s3")
        for model in models:
            key_prefix = f"{prefix}/{model}/" if prefix else f"{model}/"
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key_prefix):
                for obj in page.get("Contents", []):
                    target = dest / obj["Key"][len(prefix) :].lstrip("/")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    client.download_file(bucket, obj["Key"], str(target))
    elif scheme == "gs":
        try:
            from google.cloud import storage
        except ImportError as exc:
            raise SpecError(
                [Problem("spec.modelRepository.uri", "gs:// sources need google-cloud-storage in the image")]
            ) from exc
        client = storage.Client()
        for model in models:
            for blob in client.list_blobs(bucket, prefix=f"{prefix}/{model}/" if prefix else f"{model}/"):
                target = dest / blob.name[len(prefix) :].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                blob.download_to_filename(str(target))
    else:
        raise SpecError([Problem("spec.modelRepository.uri", f"cannot download {uri!r}")])
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
    write_repository(generated, out, root, force=True)
    return generated
