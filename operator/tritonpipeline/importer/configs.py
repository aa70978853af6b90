"""A repository's config texts to one TritonPipeline document and its findings: each config parsed, the
models and ensembles mapped, the document checked by the spec and the compiler, each problem placed at
the model and Triton field it came from."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from google.protobuf import text_format

from ..compiler import compile_pipeline
from ..compiler.triton_config import parse_text
from ..errors import Problem, SpecError
from ..settings import API_VERSION, KIND
from ..spec import parse_pipeline
from .ensembles import pipeline_entry
from .findings import (
    COMPILE_PROBLEM,
    ERROR,
    NAME_MISMATCH,
    NO_CONFIG_MISPLACED,
    NO_CONFIG_NO_VERSIONS,
    NO_CONFIG_VERSIONS,
    NO_CONFIGS,
    NOT_CARRIED,
    PLACEHOLDER_VALUE,
    SPEC_PATH,
    SPEC_PROBLEM,
    TEMPLATE_HINT,
    TEMPLATE_MORE,
    UNKNOWN_FIELD_HINT,
    WARNING,
    Finding,
    ImportResult,
)
from .reading import Reading
from .section_mappers import model_entry, without_config
from .tables import ENSEMBLE_PLATFORM, PythonFiles, VersionFiles
from .walk import report_rest


def pipeline_name(directory: str) -> str:
    """A directory's name made a DNS-1035 label (metadata.name): lowercase letters, digits and '-',
    starting with a letter, at most 63 characters."""
    text = re.sub(r"[^a-z0-9-]+", "-", directory.lower())
    text = re.sub(r"-{2,}", "-", text)
    text = re.sub(r"^[^a-z]+", "", text)[:63].rstrip("-")
    return text or "imported"


def _parse(directory: str, text: str) -> tuple[Any, Finding | None]:
    try:
        return parse_text(text), None
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        detail = re.sub(r"^\d+:\d+ : ", "", str(exc))
        lines = text.splitlines()
        here = lines[line - 1] if line and 0 < line <= len(lines) else ""
        if "${" in here:
            others = [n for n, text in enumerate(lines, 1) if PLACEHOLDER_VALUE.search(text) and n != line]
            more = TEMPLATE_MORE.format(lines=", ".join(map(str, others))) if others else ""
            detail = f"{detail.rstrip('.')}; {TEMPLATE_HINT}{more}"
        elif "has no field named" in detail:
            detail = f"{detail} {UNKNOWN_FIELD_HINT}"
        position = (line, column or 0) if line else None
        return None, Finding(ERROR, directory, "", detail, position)


def _model_order(parsed: Mapping[str, Any], ensembles: Sequence[str]) -> list[str]:
    """Models in the order the ensembles call them, then the others by name."""
    order: list[str] = []
    for e in ensembles:
        for step in parsed[e].ensemble_scheduling.step:
            name = str(step.model_name)
            if name in parsed and name not in ensembles and name not in order:
                order.append(name)
    return order + sorted(d for d in parsed if d not in ensembles and d not in order)


def import_repository(
    configs: Mapping[str, str],
    no_config: Mapping[str, bool],
    *,
    name: str,
    uri: str,
    source: str | None = None,
    unreadable: Collection[str] = (),
    version_files: Mapping[str, VersionFiles] | None = None,
    misplaced: Mapping[str, str] | None = None,
    python_files: Mapping[str, PythonFiles] | None = None,
) -> ImportResult:
    """The TritonPipeline of a model repository: `configs` maps each model directory's name to its
    config.pbtxt text; `no_config` each directory without one to whether it holds version directories.
    `name` becomes metadata.name, `uri` spec.modelRepository.uri; `source` names the repository in
    messages (default: `uri`); `unreadable` names the directories whose config.pbtxt could not be read
    (the caller reports why; ensembles calling them are not reported again); `version_files` maps a
    model directory to its first subdirectory and what that holds (entry name -> is a directory), for
    the backend of a config that names none (absent: it has no subdirectory); `misplaced` maps a
    directory without config.pbtxt to one found a level down (`1/config.pbtxt`); `python_files` maps a
    model directory to the Python files of the version Triton loads (for what a Python model's
    auto_complete_config sets). Every problem is a finding; the document is None when any is an ERROR."""
    findings: list[Finding] = []
    configs = dict(configs)
    for directory, versions in sorted(no_config.items()):
        found = (misplaced or {}).get(directory)
        if found:
            message = NO_CONFIG_MISPLACED.format(found=f"{directory}/{found}", dir=directory)
        elif not versions:
            message = NO_CONFIG_NO_VERSIONS
        else:
            carried = without_config(directory, (version_files or {}).get(directory))
            if isinstance(carried, Finding):
                configs[directory] = ""  # Triton completes an empty config
                findings.append(carried)
                continue
            message = NO_CONFIG_VERSIONS.format(why=carried)
        findings.append(Finding(NOT_CARRIED, directory, "", message))
    if not configs:
        if unreadable:
            return ImportResult(None, tuple(findings))
        findings.append(Finding(ERROR, "", "", NO_CONFIGS.format(dir=source or uri)))
        return ImportResult(None, tuple(findings))
    parsed: dict[str, Any] = {}
    unreadable = set(unreadable)
    early: dict[str, list[Finding]] = {}
    for directory in sorted(configs):
        cfg, problem = _parse(directory, configs[directory])
        if problem is not None:
            findings.append(problem)
            unreadable.add(directory)
            continue
        if not cfg.name:
            cfg.name = directory  # NORMALISATIONS: Triton names it after its directory
        elif cfg.name != directory:
            early[directory] = [
                Finding(ERROR, directory, "name", NAME_MISMATCH.format(name=str(cfg.name), dir=directory))
            ]
            cfg.name = directory
        parsed[directory] = cfg
    ensembles = sorted(d for d, c in parsed.items() if c.platform == ENSEMBLE_PLATFORM)
    order = _model_order(parsed, ensembles)
    models = {d: parsed[d] for d in order}
    origins: dict[str, tuple[str, str]] = {}
    model_docs, pipeline_docs = [], []
    stepped = {str(s.model_name) for e in ensembles for s in parsed[e].ensemble_scheduling.step}
    for i, directory in enumerate(order):
        r = Reading(directory)
        files, python = (version_files or {}).get(directory), (python_files or {}).get(directory)
        model_docs.append(model_entry(parsed[directory], r, files, python, run_by_step=directory in stepped))
        report_rest(parsed[directory], r)
        findings += early.get(directory, []) + r.findings
        origins.update(_origins(f"spec.models[{i}]", r))
    for j, directory in enumerate(ensembles):
        r = Reading(directory)
        nested = {e: parsed[e] for e in ensembles}
        pipeline_docs.append(pipeline_entry(parsed[directory], r, models, nested, unreadable))
        report_rest(parsed[directory], r)
        findings += early.get(directory, []) + r.findings
        origins.update(_origins(f"spec.pipelines[{j}]", r))
    spec: dict[str, Any] = {}
    gpus = max(
        (g + 1 for m in model_docs for inst in m.get("instances", []) for g in inst.get("gpus", [])),
        default=0,
    )
    if gpus > 1:
        spec["server"] = {"gpus": gpus}
    spec["modelRepository"] = {"uri": uri}
    spec["models"] = model_docs
    spec["pipelines"] = pipeline_docs
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
    if any(f.kind == ERROR for f in findings):
        return ImportResult(None, tuple(findings))
    try:
        tp = parse_pipeline(doc)
    except SpecError as exc:
        findings += [_located(ERROR, p, origins, SPEC_PROBLEM) for p in exc.problems]
        return ImportResult(None, tuple(findings))
    try:
        compile_pipeline(tp)
    except SpecError as exc:
        findings += [_located(WARNING, p, origins, COMPILE_PROBLEM) for p in exc.problems]
    return ImportResult(doc, tuple(findings))


def _origins(prefix: str, r: Reading) -> dict[str, tuple[str, str]]:
    out = {prefix: (r.model, "")}
    out.update({f"{prefix}.{spec}": (r.model, triton) for spec, triton in r.origin.items()})
    return out


def _located(kind: str, problem: Problem, origins: Mapping[str, tuple[str, str]], template: str) -> Finding:
    """A spec or compiler problem at the model and Triton field it came from."""
    path = problem.path
    first = origins.get(f"{path}[0]")
    if path not in origins and first is not None and first[1].endswith("[0]"):
        model, item = first  # a problem of the list itself (too many items): at the Triton list field
        return Finding(kind, model, item.removesuffix("[0]"), template.format(message=problem.message))
    while path and path not in origins:
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    message = template.format(message=problem.message)
    if not path:
        return Finding(kind, "", problem.path, message)
    model, triton = origins[path]
    if path != problem.path:
        message = SPEC_PATH.format(message=message, path=problem.path)
    return Finding(kind, model, triton, message)
