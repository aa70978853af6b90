"""Compile a TritonPipeline into a Triton model repository (pure, deterministic, no I/O)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..errors import Problem, SpecError
from ..spec import TritonPipeline, parse_pipeline
from .branch_map import branch_map
from .branches import plan_json
from .plan import plan_repository
from .plan_types import (
    LINK_TO_MODEL_FILE,
    NATIVE_ROUTER_LIBRARY,
    NATIVE_ROUTER_SLOT,
    NATIVE_ROUTER_SLOT_TEXT,
    OPEN_STREAMS_FILE,
    OPEN_STREAMS_GAUGE,
    OPEN_STREAMS_LEASE_SECONDS,
    OPEN_STREAMS_MODEL,
    RepositoryPlan,
)
from .router_choice import RouterBackend, RouterChoice
from .switch_plan import BRANCH_TAKEN_COUNTER, native_switch
from .triton_config import (
    ensemble_config,
    model_config,
    open_streams_config,
    orchestrator_config,
    router_config,
    switch_config,
    to_text,
)

__all__ = [
    "BRANCH_TAKEN_COUNTER",
    "OPEN_STREAMS_FILE",
    "OPEN_STREAMS_GAUGE",
    "OPEN_STREAMS_LEASE_SECONDS",
    "OPEN_STREAMS_MODEL",
    "Artifacts",
    "compile_pipeline",
    "files_digest",
    "graph_problems_beside",
    "open_streams_source",
    "orchestrator_source",
    "router_source",
    "tracks_open_streams",
]


def files_digest(files: Mapping[str, bytes]) -> str:
    """sha256 over every file's path and bytes, in path order: equal trees give equal digests."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path] + b"\0")
    return h.hexdigest()


def router_source() -> bytes:
    """The router model's code: one fixed file, identical for every router."""
    return resources.files(__package__).joinpath("router_model.py").read_bytes()


def orchestrator_source() -> bytes:
    """The orchestrator model's code (pipelines with conditions): one fixed file, its plan in its config."""
    return resources.files(__package__).joinpath("orchestrator_model.py").read_bytes()


def open_streams_source() -> bytes:
    """The open-streams gauge model's code (Stream routing): one fixed file."""
    return resources.files(__package__).joinpath("open_streams_model.py").read_bytes()


def tracks_open_streams(tp: TritonPipeline) -> bool:
    """Whether the repository carries the open-streams gauge: with Stream routing only."""
    return tp.spec.routing.session_affinity == "Stream"


@dataclass(frozen=True)
class Artifacts:
    """Generated repository files (relative POSIX path -> bytes) plus what the compiler decided."""

    files: dict[str, bytes]
    models: tuple[str, ...]  # declared models: their files come from modelRepository.uri/<name>/
    plan: RepositoryPlan
    router_backend: RouterBackend = "python"  # what the routers run on: router_model.py, or the native router
    router_reason: str = ""  # why (compiler/router_choice.py), when the operator chose

    @property
    def speculative(self) -> tuple[str, ...]:
        """The pipelines whose branches run for every request: those asking (`speculative`) that the
        native switch serves (the Python orchestrator, its model.py here, waits for the condition)."""
        return tuple(
            o.name
            for o in self.plan.orchestrators
            if o.speculative and f"{o.name}/1/model.py" not in self.files
        )

    def digest(self) -> str:
        """files_digest of every generated file; equal specs give equal digests."""
        return files_digest(self.files)

    def graph_summary(self) -> dict[str, Any]:
        """What a user sees in status.graph: ensembles, the routers inserted for them and what they run on
        (with the operator's reason), and the branches of each pipeline with conditions (branch_map)."""
        # a pipeline with conditions is one entry, named after it (its orchestrator), with its parts' steps
        part_of = {p.model: o for o in self.plan.orchestrators for p in o.parts}
        entries: dict[str, dict[str, Any]] = {}
        for e in self.plan.ensembles:
            o = part_of.get(e.name)
            entry = entries.setdefault(
                e.name if o is None else o.name,
                {
                    "name": e.name if o is None else o.name,
                    "maxBatchSize": e.max_batch_size if o is None else o.max_batch_size,
                    "fanOut": e.fan_out,
                    "steps": [],
                },
            )
            entry["steps"] += [s.name for s in e.steps]
        summary: dict[str, Any] = {
            "ensembles": list(entries.values()),
            "routers": [
                {
                    "name": r.name,
                    "pipeline": r.pipeline,
                    "source": r.source,
                    "consumers": [c.label for _, c in r.outputs],
                    "backend": self.router_backend,
                }
                for r in self.plan.routers
            ],
            # each branch's ensemble, condition and steps; [] rather than absent, so that a status merge
            # patch replaces the branches of a pipeline that had conditions (as `routers`)
            "conditions": [
                {**entry, "speculative": True} if entry["pipeline"] in self.speculative else entry
                for entry in branch_map(self.plan.orchestrators, self.plan.ensembles)
            ],
        }
        if self.router_reason:
            summary["routerBackend"] = {"backend": self.router_backend, "reason": self.router_reason}
        return summary


# the spec's top-level fields the compiler reads; a problem in any other (autoscaling, routing,
# networkPolicy, ...) leaves the graph readable
GRAPH_FIELDS = frozenset({"models", "pipelines", "server", "modelRepository"})


def graph_problems_beside(doc: Mapping[str, Any], problems: list[Problem]) -> list[Problem]:
    """The compiler's problems of a document whose parse found `problems`, where each of them lies in a
    field the compiler does not read: that field is left out (its default) and the rest compiled, so
    a wrong autoscaling bound and an unknown step model are reported together. [] otherwise."""
    spec = doc.get("spec")
    fields = {re.split(r"[.\[]", p.path.removeprefix("spec."), maxsplit=1)[0] for p in problems}
    if (
        not isinstance(spec, dict)
        or not all(p.path.startswith("spec.") for p in problems)
        or fields & GRAPH_FIELDS
    ):
        return []
    try:
        tp = parse_pipeline({**doc, "spec": {k: v for k, v in spec.items() if k not in fields}})
        compile_pipeline(tp)
    except SpecError as exc:
        return [p for p in exc.problems if p not in problems]
    return []


def compile_pipeline(
    tp: TritonPipeline,
    *,
    cpu_only: bool = False,
    native_router: bytes | None = None,
    router: RouterChoice | None = None,
) -> Artifacts:
    """Check every rule (raising SpecError with all problems) and render every config.

    cpu_only turns GPU instance groups into CPU ones (also implied by spec.server.gpus == 0).
    native_router: the native router's library (tritonpipeline.local.native_router.build()) for the target's
    architecture: every router then runs on it, the library in its version directory.
    router: the operator's choice (router_choice.choose_router); native without the library's bytes puts
    NATIVE_ROUTER_SLOT where the library goes, for the init container. Neither: the Python router.
    """
    backend: RouterBackend = "native" if native_router is not None else "python"
    if router is not None:
        backend = router.backend
    plan = plan_repository(tp, cpu_only=cpu_only)
    files: dict[str, bytes] = {}
    stepped = {step.model for ensemble in plan.ensembles for step in ensemble.steps}
    for model in plan.models:
        config = model_config(model, cpu_only=plan.cpu_only, run_by_step=model.name in stepped)
        files[f"{model.name}/config.pbtxt"] = to_text(config)
    code = router_source()
    for ensemble in plan.ensembles:
        files[f"{ensemble.name}/config.pbtxt"] = to_text(ensemble_config(ensemble))
        files[f"{ensemble.name}/1/.keep"] = b""
        for r in ensemble.routers:
            files[f"{r.name}/config.pbtxt"] = to_text(router_config(r, backend == "native"))
            if r.labels is not None:
                label, labelled = r.labels
                files[f"{r.name}/{label}"] = LINK_TO_MODEL_FILE + f"{labelled}/{label}".encode()
            if backend == "python":
                files[f"{r.name}/1/model.py"] = code
            elif native_router is not None:
                files[f"{r.name}/1/{NATIVE_ROUTER_LIBRARY}"] = native_router
            else:
                files[f"{r.name}/1/{NATIVE_ROUTER_SLOT}"] = NATIVE_ROUTER_SLOT_TEXT
    parts = {e.name: e for e in plan.ensembles}
    for orchestrator in plan.orchestrators:
        switch = native_switch(orchestrator, parts) if backend == "native" else None
        if switch is None:  # the Python orchestrator
            config = orchestrator_config(orchestrator, plan_json(orchestrator))
            files[f"{orchestrator.name}/config.pbtxt"] = to_text(config)
            files[f"{orchestrator.name}/1/model.py"] = orchestrator_source()
            continue
        files[f"{orchestrator.name}/config.pbtxt"] = to_text(ensemble_config(switch.ensemble))
        files[f"{orchestrator.name}/1/.keep"] = b""
        files[f"{switch.name}/config.pbtxt"] = to_text(switch_config(switch))
        if native_router is not None:
            files[f"{switch.name}/1/{NATIVE_ROUTER_LIBRARY}"] = native_router
        else:
            files[f"{switch.name}/1/{NATIVE_ROUTER_SLOT}"] = NATIVE_ROUTER_SLOT_TEXT
    if tracks_open_streams(tp):
        files[f"{OPEN_STREAMS_MODEL}/config.pbtxt"] = to_text(open_streams_config(OPEN_STREAMS_MODEL))
        files[f"{OPEN_STREAMS_MODEL}/1/model.py"] = open_streams_source()
    return Artifacts(
        files=dict(sorted(files.items())),
        models=tuple(m.name for m in plan.models),
        plan=plan,
        router_backend=backend,
        router_reason="" if router is None else router.reason,
    )
