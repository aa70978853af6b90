"""The package's layers, lowest first, and which way its imports run: one home for the rule that
tests/unit/test_layout.py holds every module of operator/tritonpipeline/ to, and for the table of it that
docs/architecture.md shows (`make generate` writes it between the page's markers, so it cannot drift).

A module's layer is its top-level name in the package (a module or a subpackage); it imports only from
its own part of its layer or the layers below, but for the imports ALLOWED names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "operator" / "tritonpipeline"


@dataclass(frozen=True)
class Layer:
    name: str
    parts: tuple[str, ...]  # the package's top-level modules and subpackages in it
    what: str


LAYERS: tuple[Layer, ...] = (
    Layer(
        "foundation",
        ("errors", "settings", "extras", "yamltext", "jsontext", "triton"),
        "errors with field paths, the operator's settings, the optional extras, the one YAML writer and "
        "the one JSON reader; what the project knows about Triton itself (admin API groups, tritonserver "
        "options, security bulletins). No other part of the package",
    ),
    Layer(
        "spec",
        ("spec",),
        "the typed CR, one module per section (`models`, `pipelines`, `server`, `routing`, `autoscaling`) "
        "over `base` (patterns, limits, the Rule type), with `resource` (the whole CR) above; `parse` (a "
        "mapping to it, field-path errors), `yaml_reader` (YAML as kubectl reads it) and `document` (a "
        "file's documents) read it",
    ),
    Layer(
        "compiler",
        ("compiler",),
        "spec to Triton artifacts: pure, deterministic; knows no cluster and no local server; the router "
        "code",
    ),
    Layer(
        "importer",
        ("importer",),
        "the compiler's direction reversed: a Triton model repository's configs to a spec (`tritonpipeline "
        "import`): the field tables, the section mappers, the walk that names what is not carried, the "
        "YAML writer; pure, like the compiler, which it uses to check what it wrote and which never uses it",
    ),
    Layer(
        "render",
        ("render",),
        "spec and artifacts to Kubernetes objects as plain dicts: the children (`manifests`, "
        "`routing_objects`, `autoscaling_objects`, `access`, `disruption`), the CRD and its status schema, "
        "status conditions, the cluster's rules (`checks`), the admission webhook's settings and "
        "configurations (`webhook_configuration`); pure: nothing here calls the API server",
    ),
    Layer(
        "kube",
        ("kube",),
        "the thin Kubernetes API client (`api_client`), through which everything above reaches the API "
        "server",
    ),
    Layer(
        "local, runtime, client",
        ("local", "runtime", "client"),
        "the repository on disk, the local tritonserver, the native router's build and the init container "
        "(`local/`); the operator process: its memory, compile workers, log events, metrics, health and "
        "webhook (`runtime/`; the webhook in `admission`, `webhook_certificates`, `webhook_server`; its "
        "corrections to kopf in `kopf_fixes`); the client that keeps a sequence on one replica. The three do "
        "not import each other",
    ),
    Layer("reconcile", ("reconcile",), "one reconcile: parse, render, apply and prune, report; drift repair"),
    Layer("handlers", ("handlers",), "the kopf handlers: thin entry points into reconcile/ and the webhook"),
    Layer("cli", ("cli",), "`tritonpipeline`, over all of it"),
)

# the imports that run across, (layer part, module) with why: the API client counts failed calls in the
# operator's metrics, a leaf module (prometheus_client only)
ALLOWED: dict[tuple[str, str], str] = {
    (
        "kube",
        "tritonpipeline.runtime.metrics",
    ): "the API client counts failed calls in the operator's metrics (a leaf module: prometheus_client only)",
}

BEGIN = "<!-- generated: layers (tools/layers.py, `make generate`); do not edit below -->"
END = "<!-- generated: end of layers -->"


def where(part: str, package: Path = PACKAGE) -> str:
    """A part as a path under the package: `spec/` for a subpackage, `client.py` for a module."""
    return f"`{part}/`" if (package / part).is_dir() else f"`{part}.py`"


def table(package: Path = PACKAGE) -> str:
    """The layers as a Markdown table, lowest first, and the imports allowed across."""
    rows = ["| # | layer | what | where |", "|---|---|---|---|"]
    for i, layer in enumerate(LAYERS, 1):
        rows.append(
            f"| {i} | {layer.name} | {layer.what} | {', '.join(where(p, package) for p in layer.parts)} |"
        )
    across = [f"- `{part}` imports `{module}`: {why}" for (part, module), why in ALLOWED.items()]
    return "\n".join([*rows, "", "The only imports across the layers:", "", *across])


def expand(markdown: str, package: Path = PACKAGE) -> str:
    """`markdown` with the text between BEGIN and END (both kept) replaced by the table. A page without
    the markers is an error: the generated part would be lost."""
    section = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not section.search(markdown):
        raise ValueError(f"docs/architecture.md: the markers {BEGIN!r} ... {END!r} are missing")
    return section.sub(lambda _: f"{BEGIN}\n\n{table(package)}\n\n{END}", markdown, count=1)
