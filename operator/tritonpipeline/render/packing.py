"""The generated repository in ConfigMaps: one home for the format the operator writes (pack) and the
init container reads back (unpack). Pure.

A repository is split by file over parts, each below a byte limit (a ConfigMap holds at most 1 MiB).
Each file is stored under a key `fNNNN` (ConfigMap keys allow only `[-._a-zA-Z0-9]`, so paths never
become keys): UTF-8 text in `data`, anything else base64 in `binaryData`. Each part also holds
`manifest-NNN.json`: which key is which path, the part's number, the number of parts, the declared
models and the digest of the whole repository, so a reader can tell a complete, consistent set from a
mix of two versions.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..compiler import files_digest
from ..errors import Problem, SpecError

MANIFEST_PREFIX = "manifest-"


@dataclass(frozen=True)
class Part:
    """One ConfigMap's `data` (text) and `binaryData` (base64) of the packed repository."""

    data: dict[str, str] = field(default_factory=dict)
    binary_data: dict[str, str] = field(default_factory=dict)

    def size(self) -> int:
        """Bytes of keys and stored values, as they travel (base64 counted encoded)."""
        return sum(len(k) + len(v.encode()) for k, v in (*self.data.items(), *self.binary_data.items()))


@dataclass(frozen=True)
class Unpacked:
    """What the parts carried: relative path -> bytes, the declared models and the checked digest."""

    files: dict[str, bytes]
    models: tuple[str, ...]
    digest: str


def manifest_key(index: int) -> str:
    return f"{MANIFEST_PREFIX}{index:03d}.json"


def _stored(data: bytes) -> tuple[bool, str]:
    """(is text, the stored value): UTF-8 text as is, anything else base64."""
    try:
        return True, data.decode("utf-8")
    except UnicodeDecodeError:
        return False, base64.b64encode(data).decode("ascii")


def _entry_size(key: str, path: str, data: bytes) -> int:
    """What one file adds to a part: its key and stored value, and its `"key": "path", ` manifest entry."""
    return len(key) + len(_stored(data)[1].encode()) + len(json.dumps(key)) + len(json.dumps(path)) + 4


def _manifest(index: int, parts: int, digest: str, models: Iterable[str], keys: Mapping[str, str]) -> str:
    body = {"part": index, "parts": parts, "digest": digest, "models": list(models), "files": dict(keys)}
    return json.dumps(body, sort_keys=True)


def _base_size(models: tuple[str, ...]) -> int:
    """A part's size before any file: its manifest with no files (part numbers up to 999)."""
    return len(manifest_key(0)) + len(_manifest(999, 999, "0" * 64, models, {}))


def parts_digest(parts: Iterable[Part]) -> str:
    """sha256 of what the parts store, in order: equal parts give equal digests (ConfigMap names)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps([part.data, part.binary_data], sort_keys=True).encode() + b"\0")
    return h.hexdigest()


def too_large(files: Mapping[str, bytes], models: Iterable[str], max_bytes: int) -> list[str]:
    """The paths of files that cannot fit in a part of `max_bytes` even alone (a file is never split)."""
    base = _base_size(tuple(models))
    return [
        path
        for index, (path, data) in enumerate(sorted(files.items()))
        if base + _entry_size(f"f{index:04d}", path, data) > max_bytes
    ]


def pack(files: Mapping[str, bytes], models: Iterable[str], max_bytes: int) -> list[Part]:
    """Split `files` into parts of at most `max_bytes` each (at least one part, even when empty).
    Raises SpecError naming any file too large for a part of its own."""
    models = tuple(models)
    oversized = too_large(files, models, max_bytes)
    if oversized:
        raise SpecError([Problem("spec", too_large_message(p, files[p], max_bytes)) for p in oversized])
    base = _base_size(models)
    groups: list[dict[str, tuple[str, bytes]]] = [{}]
    size = base
    for index, (path, data) in enumerate(sorted(files.items())):
        key = f"f{index:04d}"
        add = _entry_size(key, path, data)
        if groups[-1] and size + add > max_bytes:
            groups.append({})
            size = base
        groups[-1][key] = (path, data)
        size += add
    digest = files_digest(files)
    return [_part(i, len(groups), digest, models, group) for i, group in enumerate(groups)]


def too_large_message(path: str, data: bytes, max_bytes: int) -> str:
    return f"generated file {path!r} is {len(data)} bytes, over the ConfigMap limit of {max_bytes} bytes"


def _part(
    index: int, parts: int, digest: str, models: tuple[str, ...], group: Mapping[str, tuple[str, bytes]]
) -> Part:
    text_data: dict[str, str] = {}
    binary_data: dict[str, str] = {}
    for key, (_, data) in group.items():
        text, value = _stored(data)
        (text_data if text else binary_data)[key] = value
    keys = {key: path for key, (path, _) in group.items()}
    text_data[manifest_key(index)] = _manifest(index, parts, digest, models, keys)
    return Part(dict(sorted(text_data.items())), dict(sorted(binary_data.items())))


def entries_of(configmaps: Iterable[Mapping[str, Any]]) -> dict[str, bytes]:
    """Key -> bytes of ConfigMap objects, as a volume of them shows the keys (binaryData decoded)."""
    entries: dict[str, bytes] = {}
    for cm in configmaps:
        entries.update({k: v.encode("utf-8") for k, v in (cm.get("data") or {}).items()})
        entries.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return entries


def _refused(message: str) -> SpecError:
    return SpecError([Problem("", message)])


def _safe_path(path: str) -> bool:
    """A relative POSIX path that stays below the repository (no `..`, not absolute, not empty)."""
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts


def _is_manifest(m: Any) -> bool:
    """Whether `m` has the fields, of the types, that _manifest writes."""
    kinds = {"part": int, "parts": int, "digest": str, "models": list, "files": dict}
    return isinstance(m, dict) and all(isinstance(m.get(k), t) for k, t in kinds.items())


def unpack(entries: Mapping[str, bytes]) -> Unpacked:
    """Rebuild the files from every part's keys merged (key -> bytes, as mounted). Refuses an incomplete
    set, parts of different versions, unsafe paths and files that do not match the digest."""
    try:
        manifests = [json.loads(v) for k, v in sorted(entries.items()) if k.startswith(MANIFEST_PREFIX)]
    except ValueError:
        raise _refused("a manifest-*.json in the generated ConfigMaps is not JSON") from None
    if not manifests:
        raise _refused("no manifest-*.json found in the generated ConfigMaps")
    if not all(_is_manifest(m) for m in manifests):
        raise _refused("a manifest-*.json in the generated ConfigMaps is not one this version writes")
    counts = {m["parts"] for m in manifests}
    digests = {m["digest"] for m in manifests}
    numbers = sorted(m["part"] for m in manifests)
    if len(counts) != 1 or len(digests) != 1 or numbers != list(range(counts.pop())):
        raise _refused("the generated ConfigMaps are incomplete or from different versions")
    files: dict[str, bytes] = {}
    for m in manifests:
        for key, path in m["files"].items():
            if not _safe_path(path):
                raise _refused(f"refusing unsafe path {path!r} in the generated ConfigMaps")
            if key not in entries:
                raise _refused(f"the generated ConfigMaps lack {key!r} ({path})")
            files[path] = entries[key]
    digest = digests.pop()
    if files_digest(files) != digest:
        raise _refused("the generated files do not match their digest")
    return Unpacked(files, tuple(manifests[0]["models"]), digest)
