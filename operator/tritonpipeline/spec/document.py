"""The whole TritonPipeline (spec, metadata) and reading it from YAML with field-path errors."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from .. import jsontext
from ..errors import Problem, SpecError, kind_of, plain_number, quote
from ..settings import API_VERSION, KIND
from ..yamltext import STR_TAG
from . import kubernetes
from .autoscaling import Autoscaling, NetworkPolicy
from .base import DNS_LABEL_RE, K8S_NAME_RE, MAX_MODELS, MAX_PIPELINES, FieldProblems, _Base, _name_rule
from .models import Instance, Model
from .pipelines import Pipeline
from .routing import Routing
from .server import ModelRepository, Server


class PipelineSpec(_Base):
    server: Server = Field(default=Server(), description="The Triton pods.")
    model_repository: ModelRepository = Field(description="Where the model files live.")
    models: Annotated[list[Model], Field(min_length=1, max_length=MAX_MODELS)] = Field(
        description="Every model the pipelines use; files under `uri/<name>/`. Unique names."
    )
    pipelines: Annotated[list[Pipeline], Field(max_length=MAX_PIPELINES)] = Field(
        default=[],
        description="Each becomes one ensemble model named after it. Unique names. None: the models are "
        "served on their own (a BLS model that calls the others, say).",
    )
    routing: Routing = Field(default=Routing(), description="Session affinity across pods.")
    autoscaling: Autoscaling | None = Field(default=None, description="Absent = fixed `server.replicas`.")
    network_policy: NetworkPolicy | None = Field(
        default=None,
        description="Absent: no NetworkPolicy. Present: one NetworkPolicy (ingress only) on the pipeline's "
        "pods (see docs/concepts/security.md).",
    )

    @model_validator(mode="after")
    def _instance_gpus(self) -> PipelineSpec:
        found = [
            (f".models[{i}].instances[{j}].gpus", message)
            for i, model in enumerate(self.models)
            for j, inst in enumerate(model.instances)
            if (message := _gpus_problem(inst, self.server.gpus))
        ]
        if found:
            raise FieldProblems(found)
        return self


def _gpus_problem(inst: Instance, server_gpus: int) -> str | None:
    """Why an instance group's GPU indices cannot work in a pod with `server_gpus` GPUs, or None.
    With server.gpus 0 every GPU group runs on the CPU and its indices are dropped (a warning)."""
    if not inst.gpus:
        return None
    if inst.kind != "GPU":
        return f"gpus pins GPU devices, so it needs kind GPU (this group has kind {inst.kind})"
    wrong = [g for g in inst.gpus if g >= server_gpus]
    if server_gpus and wrong:
        return (
            f"GPU index {', '.join(map(str, wrong))} does not exist in the pod: spec.server.gpus is "
            f"{server_gpus}, so the valid indices are 0..{server_gpus - 1}"
        )
    return None


# ObjectMeta's fields (what `kubectl get -o yaml` shows included): any other is refused, as kubectl's
# strict field validation refuses it
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
})  # fmt: skip
UNKNOWN_META_FIELD = "unknown field {name} of metadata (Kubernetes' ObjectMeta); expected one of: {known}"


class Metadata(BaseModel):
    """Kubernetes ObjectMeta: name and namespace matter, labels and annotations are checked as the
    apiserver checks them; the apiserver's other fields are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: Annotated[str, _name_rule(K8S_NAME_RE, "metadata.name")]
    namespace: Annotated[str, _name_rule(DNS_LABEL_RE, "namespace")] | None = None
    generation: int | None = None
    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = [k for k in value if k not in OBJECT_META_FIELDS]
            if unknown:
                known = ", ".join(sorted(OBJECT_META_FIELDS))
                raise FieldProblems(
                    [(f".{k}", UNKNOWN_META_FIELD.format(name=quote(k), known=known)) for k in unknown]
                )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return value if value is None else kubernetes.passed_through(value, kubernetes.labels)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return value if value is None else kubernetes.passed_through(value, kubernetes.annotation_map)


class TritonPipeline(_Base):
    api_version: str
    kind: str
    metadata: Metadata
    spec: PipelineSpec
    status: dict[str, Any] | None = None

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        if value != API_VERSION:
            raise ValueError(f"expected {API_VERSION!r}, got {quote(value)}")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != KIND:
            raise ValueError(f"expected {KIND!r}, got {quote(value)}")
        return value

    @property
    def name(self) -> str:
        return self.metadata.name


# --------------------------------------------------------------------------- YAML


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    # only keys written in this mapping count: a `<<` merge key's entries may be overridden on purpose
    explicit = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node in explicit:
        if key_node.tag in (_INT, _FLOAT):  # 1519: (an ONNX tensor's name) is the key "1519", as for kubectl
            key_node.tag = STR_TAG
        elif key_node.tag == _BOOL:  # kubectl would make `n:` the key "false"
            message = f"the key {key_node.value!r} is read as a boolean, by kubectl too: quote it"
            raise yaml.constructor.ConstructorError(None, None, message, key_node.start_mark)
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, Hashable):  # `? [a]` or `? {a: 1}`: no field name
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"a mapping key must be a string (a field name), got {kind_of(key)}",
                key_node.start_mark,
            )
        if key in seen:
            first = seen[key].start_mark
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first defined at line {first.line + 1}); "
                "YAML would silently keep only the last one",
                mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# Plain scalars read as kubectl reads them (go-yaml, through sigs.k8s.io/yaml), so that `validate` and the
# cluster agree on a file: `y` and `n` are booleans too (a tensor named y is refused as kubectl refuses
# it, not accepted here and refused there), 1e3 is a number (PyYAML's YAML 1.1 needs a dot), 1:20 is text
# (no sexagesimal numbers) and so is 2024-01-01 (no timestamps: JSON has none).
_BOOL, _INT, _FLOAT, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float", "null"))
_StrictLoader.yaml_implicit_resolvers = {
    first: [
        (tag, pattern)
        for tag, pattern in resolvers
        if tag not in (_BOOL, _INT, _FLOAT) and "timestamp" not in tag
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    _BOOL,
    re.compile(r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
    list("yYnNtTfFoO"),
)
_StrictLoader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_StrictLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_StrictLoader.bool_values = {**yaml.SafeLoader.bool_values, "y": True, "n": False}
UNQUOTED_SCALAR = (
    " (YAML, kubectl's too, reads a plain y, n, yes, no, on, off, true, false or number as no string: "
    "quote it)"
)


def _duplicate_keys(node: yaml.Node | None, path: str, seen_nodes: set[int]) -> list[Problem]:
    """Duplicate mapping keys anywhere under a composed node, reported at their field path."""
    if node is None or id(node) in seen_nodes:
        return []
    seen_nodes.add(id(node))
    found: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], yaml.Node] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            child = f"{path}.{key}" if path and key is not None else (key or path)
            if key is not None and key_node.tag != "tag:yaml.org,2002:merge":
                if (key_node.tag, key) in first:
                    was, mark = first[(key_node.tag, key)].start_mark, key_node.start_mark
                    found.append(
                        Problem(
                            child,
                            f"duplicate key {key!r} at line {mark.line + 1}, column {mark.column + 1} (first "
                            f"defined at line {was.line + 1}); YAML would silently keep only the last one",
                        )
                    )
                first.setdefault((key_node.tag, key), key_node)
            found += _duplicate_keys(value_node, child, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicate_keys(item, f"{path}[{i}]", seen_nodes)
    return found


TOO_DEEP = (
    "invalid YAML: values nested more deeply than can be read (lists or mappings inside one another, "
    "hundreds of levels); a TritonPipeline needs a few dozen"
)


# a value the operator read no further (jsontext.py): it was nested deeper than any field of a pipeline is
NESTED_TOO_DEEP = (
    f"nested more than {jsontext.MAX_DEPTH} levels deep (mappings or lists inside one another); no field of "
    "a TritonPipeline is: this pipeline is not read"
)
MANAGED = ("metadata", "managedFields")  # the API server's record of who set what: it mirrors the object


def load_documents(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """Parse YAML text (one or several documents) refusing duplicate keys; empty documents are skipped."""
    return [doc for _, doc in load_labelled(text, source)]


def load_labelled(text: str, source: str = "<input>") -> list[tuple[str, dict[str, Any]]]:
    """Each non-empty document of a YAML text with its label for messages: `document N: `, N its place
    among all the text's documents (an empty or comment-only one counts, as an editor shows them), where
    the text holds several non-empty documents; else "". Duplicate keys are refused."""
    try:
        nodes = list(yaml.compose_all(text, Loader=_StrictLoader))
        several = sum(not (isinstance(n, yaml.ScalarNode) and n.tag == _NULL) for n in nodes) > 1
        dups = [
            Problem((f"document {i + 1}: " if several and p.path else "") + p.path, p.message)
            for i, node in enumerate(nodes)
            for p in _duplicate_keys(node, "", set())
        ]
        if dups:
            raise SpecError(dups, source)
        every = list(yaml.load_all(text, Loader=_StrictLoader))  # an empty document is None, as its node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([Problem(where, f"invalid YAML: {exc.problem or exc}")], source) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem("", f"invalid YAML: {exc}")], source) from None
    except RecursionError:  # the YAML reader and the checks walk nested values recursively
        raise SpecError([Problem("", TOO_DEEP)], source) from None
    labelled = [
        (f"document {i + 1}: " if several else "", doc) for i, doc in enumerate(every) if doc is not None
    ]
    if not labelled:
        raise SpecError([Problem("", "no TritonPipeline document found")], source)
    for label, doc in labelled:
        if not isinstance(doc, dict):
            where = label.removesuffix(": ") or "document 1"
            raise SpecError(
                [Problem(where, f"expected a mapping (a TritonPipeline), got {kind_of(doc)}")], source
            )
    return labelled


# --------------------------------------------------------------------------- errors


def format_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """('spec', 'models', 0, 'name') -> 'spec.models[0].name'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _allowed_fields(model: type[BaseModel]) -> list[str]:
    return sorted((f.alias or n) for n, f in model.model_fields.items())


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Walk the model tree along a location to find which model class holds it."""
    current: Any = TritonPipeline
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next((f for n, f in current.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return current
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    while args:
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0]
        inner = [a for a in args if getattr(a, "__args__", None)]
        if not inner:
            break
        annotation = inner[0]
        args = getattr(annotation, "__args__", None)
    return annotation


def _message(err: ErrorDetails) -> str:
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        owner = _model_at(tuple(err["loc"][:-1]))
        allowed = f" (allowed: {', '.join(_allowed_fields(owner))})" if owner else ""
        return f"unknown field{allowed}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected', '')}, got {quote(value)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected an integer, got {kind_of(value)} {quote(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"expected a number, got {kind_of(value)} {quote(value)}"
    if kind == "finite_number":
        return f"must be a finite number, got {quote(value)}"
    if kind in ("string_type",) and isinstance(value, (bool, int, float)):
        return f"expected a string, got {kind_of(value)} {quote(value)}{UNQUOTED_SCALAR}"
    if kind in ("string_type",):
        return f"expected a string, got {kind_of(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {kind_of(value)} {quote(value)}"
    if kind in ("list_type",):
        return f"expected a list, got {kind_of(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping, got {kind_of(value)}"
    if kind == "greater_than_equal":
        return f"must be >= {plain_number(ctx['ge'])}, got {quote(value)}"
    if kind == "greater_than":
        return f"must be > {plain_number(ctx['gt'])}, got {quote(value)}"
    if kind == "less_than_equal":
        return f"must be <= {plain_number(ctx['le'])}, got {quote(value)}"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"allows at most {ctx.get('max_length')} item(s)"
    if kind == "string_too_long":
        return f"allows at most {ctx.get('max_length')} characters"
    if kind in ("string_too_short",):
        return "must not be empty"
    return str(err["msg"])


def _problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        error = (err.get("ctx") or {}).get("error")
        if isinstance(error, FieldProblems):
            problems += [Problem(format_path(loc) + sub, message) for sub, message in error.items]
            continue
        problems.append(Problem(format_path(loc), _message(err)))
    return problems


# what a caller adds to the problems of a document that does not parse: the compiler's, where it can
# still read the graph (compiler.graph_problems_beside), so that every problem is reported at once
Beside = Callable[[dict[str, Any], list[Problem]], list[Problem]]


def parse_pipeline(
    doc: dict[str, Any],
    source: str | None = None,
    *,
    beside: Beside | None = None,
    newer: list[str] | None = None,
) -> TritonPipeline:
    """Validate one TritonPipeline mapping. Raises SpecError listing every problem found, and what
    `beside` finds too.

    With `newer` (for an object the API server stored or sends for admission): a field the schema does not
    know is no problem; it is left out and its path appended to `newer`. The API server prunes every field
    its CRD does not define, after defaulting, so such a field is one a newer CRD defines (applied before
    this operator was upgraded, or kept after a rollback): reported and ignored, never refused. A user's
    file (`validate`) has no `newer`: an unknown field there is a typo."""
    cut = [Problem(format_path(at), NESTED_TOO_DEEP) for at in jsontext.cut_paths(doc) if at[:2] != MANAGED]
    if cut:
        raise SpecError(cut, source)
    try:
        return TritonPipeline.model_validate(doc)
    except ValidationError as exc:
        unknown = [tuple(e["loc"]) for e in exc.errors(include_url=False) if e["type"] == "extra_forbidden"]
        known = _without(doc, unknown) if newer is not None and unknown else doc
        if newer is not None and known != doc:  # the rest is parsed again: its own problems are raised
            newer += [format_path(loc) for loc in unknown]
            return parse_pipeline(known, source, beside=beside, newer=newer)
        problems = _problems(exc)
        raise SpecError(problems + (beside(doc, problems) if beside else []), source) from None


def _without(value: Any, locs: list[tuple[Any, ...]]) -> Any:
    """`value` less what lies at each location (pydantic's, through mappings and lists), copied only along
    their paths."""
    if not locs:
        return value
    gone = {loc[0] for loc in locs if len(loc) == 1}
    below: dict[Any, list[tuple[Any, ...]]] = {}
    for loc in locs:
        if len(loc) > 1:
            below.setdefault(loc[0], []).append(loc[1:])
    if isinstance(value, Mapping):
        return {k: _without(v, below.get(k, [])) for k, v in value.items() if k not in gone}
    if isinstance(value, list):
        return [_without(v, below.get(i, [])) for i, v in enumerate(value)]
    return value


# What a pipeline says of the fields `parse_pipeline` put in `newer`: in its status and the webhook's warning
NEWER_FIELDS = (
    "defined by a newer CRD than this operator knows (the API server keeps only fields its CRD defines): "
    "this operator ignores them and serves the rest of the spec; they take effect once the operator of "
    "that CRD's release runs"
)


def newer_fields(paths: list[str]) -> str:
    """The paths `parse_pipeline` put in `newer`, each once, a list index as [*] (a CRD's default fills a
    field in every item): `spec.server.someSetting, spec.models[*].other`."""
    return ", ".join(dict.fromkeys(re.sub(r"\[\d+\]", "[*]", p) for p in paths))


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
