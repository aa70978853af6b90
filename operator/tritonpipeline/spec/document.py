"""The documents of a file meant as TritonPipelines: reading the file (or standard input), telling them
from other Kubernetes objects kept beside them and from files that are no Kubernetes object at all, and
parsing each with its document's place (two documents for one object are refused)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Problem, SpecError, quote
from ..settings import API_VERSION, KIND
from .parse import parse_pipeline
from .resource import TritonPipeline
from .yaml_reader import load_labelled


@dataclass(frozen=True)
class Numbered:
    """A pipeline with the place of its document in the file, for messages."""

    pipeline: TritonPipeline
    label: str  # "document N: " where the file holds several documents, else ""


OTHER_OBJECTS_ONLY = "no TritonPipeline document found (the file holds {objects})"
NOT_A_RESOURCE = (
    "not a TritonPipeline: no apiVersion, kind or spec at the top (its keys: {keys}); is this the right file?"
)
KEYS_NAMED = 6  # the most top-level keys NOT_A_RESOURCE names


def not_a_resource(doc: dict[str, Any]) -> Problem | None:
    """One problem for a document that is no Kubernetes object at all (a Helm values file, a config):
    none of apiVersion, kind and spec, so the parse would only list every key as unknown. None for
    anything else (a TritonPipeline missing some of them gets each problem named)."""
    if any(key in doc for key in ("apiVersion", "kind", "spec")):
        return None
    keys = [str(key) for key in doc]
    named = ", ".join(keys[:KEYS_NAMED]) + (
        f" and {len(keys) - KEYS_NAMED} more" if len(keys) > KEYS_NAMED else ""
    )
    return Problem("", NOT_A_RESOURCE.format(keys=quote(named, 200).strip("'\"") or "none"))


def other_object(doc: dict[str, Any]) -> str | None:
    """`Kind name` of a document that is another Kubernetes object (a Namespace, a PersistentVolumeClaim
    kept in the same file): its apiVersion is not of this API group and its kind is not TritonPipeline.
    None for anything meant as a TritonPipeline, however wrong (it is checked and its problems named)."""
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not (isinstance(api_version, str) and isinstance(kind, str) and api_version and kind):
        return None
    if kind == KIND or api_version.split("/")[0] == API_VERSION.split("/")[0]:
        return None
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    return f"{kind} {name}" if isinstance(name, str) else kind


@dataclass(frozen=True)
class Document:
    """One document of a file meant as a TritonPipeline, as read (not yet checked), with its place."""

    body: dict[str, Any]
    label: str  # "document N: " where the file holds several documents, else ""


def read_documents(text: str, source: str = "<input>") -> list[Document | Problem]:
    """In the order of a YAML text: each document meant as a TritonPipeline, with its place, or the
    problem of one that is no Kubernetes object at all; other Kubernetes objects in the file
    (other_object) are passed over. Raises SpecError for YAML that does not read, or a file of other
    objects only."""
    out: list[Document | Problem] = []
    others: list[str] = []
    for label, doc in _listed(load_labelled(text, source)):
        other = other_object(doc)
        if other is not None:
            others.append(other)
            continue
        stray = not_a_resource(doc)
        out.append(
            Document(doc, label) if stray is None else Problem(label.removesuffix(": "), stray.message)
        )
    if not out:
        raise SpecError([Problem("", OTHER_OBJECTS_ONLY.format(objects=", ".join(others)))], source)
    return out


def parse_numbered(text: str, source: str = "<input>") -> list[Numbered]:
    """Parse every TritonPipeline document in a YAML text (read_documents), each with its document's
    place. Problems of all documents are collected. The schema's problems only: `validate`
    (render/checks.py) is the one check of a pipeline, its graph and what a cluster refuses."""
    out: list[Numbered] = []
    problems: list[Problem] = []
    for document in read_documents(text, source):
        if isinstance(document, Problem):
            problems.append(document)
            continue
        try:
            out.append(Numbered(parse_pipeline(document.body), document.label))
        except SpecError as exc:
            problems += [Problem(document.label + p.path, p.message) for p in exc.problems]
    problems += same_names(out) if not problems else []
    if problems:
        raise SpecError(problems, source)
    return out


def _listed(labelled: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The documents with the items of each `kind: List` in their place (what `kubectl get -o yaml` writes
    for several objects), labelled `items[i].`."""
    out: list[tuple[str, Any]] = []
    for label, doc in labelled:
        items = doc.get("items")
        if doc.get("kind") == "List" and doc.get("apiVersion") == "v1" and isinstance(items, list):
            out += [
                (f"{label}items[{i}].", item if isinstance(item, dict) else {})
                for i, item in enumerate(items)
            ]
        else:
            out.append((label, doc))
    return out


def parse_text(text: str, source: str = "<input>") -> list[TritonPipeline]:
    """Parse every TritonPipeline document in a YAML text (parse_numbered, without the places)."""
    return [n.pipeline for n in parse_numbered(text, source)]


def same_names(pipelines: list[Numbered]) -> list[Problem]:
    """Two documents for one object (same name and namespace): a cluster would keep only the last."""
    first: dict[tuple[str | None, str], str] = {}
    found = []
    for n in pipelines:
        key = (n.pipeline.metadata.namespace, n.pipeline.name)
        if key in first:
            where = f" in namespace {key[0]!r}" if key[0] else ""
            found.append(
                Problem(
                    f"{n.label}metadata.name",
                    f"a second TritonPipeline named {n.pipeline.name!r}{where} (also "
                    f"{first[key].rstrip(': .')}); applying the file would keep only the last one",
                )
            )
        first.setdefault(key, n.label)
    return found


# the most of a file `load_file` reads: the apiserver takes requests of 3 MiB and stores objects of 1.5 MiB,
# so a file of pipelines is far smaller; /dev/zero or a 6 GB log given by mistake is refused, not read
MAX_FILE_BYTES = 8 * 1024 * 1024
FILE_TOO_LARGE = (
    "file is larger than {limit} MiB: not a file of TritonPipelines (the apiserver stores an object of at "
    "most 1.5 MiB)"
)


STDIN = "-"  # the file name that reads standard input, as kubectl's `-f -`


def read_file(path: str | Path) -> str:
    """The text of a YAML file (at most MAX_FILE_BYTES); STDIN reads standard input. Raises SpecError
    naming the file for what cannot be read."""
    p = Path(path)
    try:
        if str(path) == STDIN:
            if sys.stdin is None:  # closed: `validate - <&-`
                raise SpecError([Problem("", "cannot read standard input: it is closed")], STDIN)
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with p.open("rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise SpecError([Problem("", FILE_TOO_LARGE.format(limit=MAX_FILE_BYTES >> 20))], str(p))
        text = data.decode("utf-8")
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read file: {exc.strerror}")], str(p)) from None
    except UnicodeDecodeError:
        raise SpecError([Problem("", "file is not UTF-8 text")], str(p)) from None
    return text


def load_file(path: str | Path) -> list[TritonPipeline]:
    """The pipelines of a YAML file (read_file, then parse_numbered without the places)."""
    return [n.pipeline for n in parse_numbered(read_file(path), str(Path(path)))]
