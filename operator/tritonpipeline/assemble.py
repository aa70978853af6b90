"""The init container's job: build the model repository from the operator's ConfigMaps and the source.

Volume sources (pvc://) are mounted and linked, not copied; s3:// and gs:// sources are downloaded
(only the declared models) with the credentials the pod gets from `secretRef`. The generated configs
are laid over the result.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import Problem, SpecError
from .kube.manifests import MANIFEST_PREFIX
from .repository import write_repository


@dataclass(frozen=True)
class GeneratedRepository:
    files: dict[str, bytes]
    models: tuple[str, ...]
    digest: str


def digest_of(files: dict[str, bytes]) -> str:
    """Same digest as compiler.Artifacts.digest(), recomputed from what the ConfigMaps carried."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path] + b"\0")
    return h.hexdigest()


def read_generated(data: dict[str, str]) -> GeneratedRepository:
    """Rebuild the generated files from ConfigMap data (all parts merged: key -> text)."""
    manifests = [json.loads(v) for k, v in sorted(data.items()) if k.startswith(MANIFEST_PREFIX)]
    if not manifests:
        raise SpecError([Problem("", "no manifest-*.json found in the generated ConfigMaps")])
    parts = {m["parts"] for m in manifests}
    digests = {m["digest"] for m in manifests}
    if len(parts) != 1 or len(manifests) != parts.pop() or len(digests) != 1:
        raise SpecError([Problem("", "the generated ConfigMaps are incomplete or from different versions")])
    files: dict[str, bytes] = {}
    for m in manifests:
        for key, path in m["files"].items():
            if Path(path).is_absolute() or ".." in Path(path).parts:
                raise SpecError([Problem("", f"refusing unsafe path {path!r} in the generated ConfigMaps")])
            files[path] = data[key].encode("utf-8")
    digest = digests.pop()
    if digest_of(files) != digest:
        raise SpecError([Problem("", "the generated files do not match their digest")])
    return GeneratedRepository(files, tuple(manifests[0]["models"]), digest)


def read_generated_dir(directory: Path) -> GeneratedRepository:
    return read_generated({p.name: p.read_text() for p in directory.iterdir() if p.is_file()})


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


def assemble(generated_dir: Path, source: str, out: Path) -> GeneratedRepository:
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
