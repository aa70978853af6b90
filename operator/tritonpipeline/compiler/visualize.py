"""Mermaid and Graphviz DOT views of compiled ensembles, with inserted routers marked."""

from __future__ import annotations

from dataclasses import dataclass

from .plan_types import LATEST_VERSION, EnsemblePlan, RepositoryPlan, StepPlan


@dataclass(frozen=True)
class _Edge:
    src: str
    dst: str
    label: str


@dataclass(frozen=True)
class _Node:
    id: str
    label: str
    kind: str  # input | step | router | output


def _step_label(s: StepPlan) -> str:
    """The step's name, then its model where that differs and the version it calls where it names one."""
    called = [s.model] if s.model != s.name else []
    called += [f"version {s.version}"] if s.version != LATEST_VERSION else []
    return f"{s.name} ({', '.join(called)})" if called else s.name


def _graph(e: EnsemblePlan, prefix: str) -> tuple[list[_Node], list[_Edge]]:
    nodes: list[_Node] = []
    ids: dict[tuple[str, str], str] = {}

    def node(kind: str, name: str, label: str) -> str:
        key = (kind, name)
        if key not in ids:
            ids[key] = f"{prefix}{len(ids)}"
            nodes.append(_Node(ids[key], label, kind))
        return ids[key]

    writers: dict[str, tuple[str, str]] = {}
    for name, _ in e.inputs:
        writers[name] = (node("input", name, f"input {name}"), name)
    routers = {r.name for r in e.routers}
    for s in e.steps:
        kind = "router" if s.name in routers else "step"
        label = f"router {s.name}" if kind == "router" else _step_label(s)
        nid = node(kind, s.name, label)
        for out, tensor in s.output_map:
            writers[tensor] = (nid, out)
    edges: list[_Edge] = []
    for s in e.steps:
        nid = ids[("router" if s.name in routers else "step", s.name)]
        for inp, tensor in s.input_map:
            src, out = writers[tensor]
            edges.append(_Edge(src, nid, inp if out == inp else f"{out} -> {inp}"))
    for name, _ in e.outputs:
        src, out = writers[name]
        edges.append(_Edge(src, node("output", name, f"output {name}"), out))
    return nodes, edges


def _mermaid_text(text: str) -> str:
    """Text for a quoted Mermaid label: `#` and `"` as Mermaid's entity codes (tensor names may hold both)."""
    return text.replace("#", "#35;").replace('"', "#quot;")


def to_mermaid(plan: RepositoryPlan) -> str:
    lines = ["flowchart LR"]
    for i, e in enumerate(plan.ensembles):
        lines.append(
            f'  subgraph e{i}["ensemble {e.name} (fanOut: {e.fan_out}, maxBatchSize: {e.max_batch_size})"]'
        )
        nodes, edges = _graph(e, f"e{i}n")
        for n in nodes:
            shape = {"input": '(["{}"])', "output": '(["{}"])', "router": '{{"{}"}}', "step": '["{}"]'}[
                n.kind
            ]
            lines.append(f"    {n.id}{shape.format(_mermaid_text(n.label))}")
            if n.kind == "router":
                lines.append(f"    class {n.id} router")
        for ed in edges:
            lines.append(f'    {ed.src} -->|"{_mermaid_text(ed.label)}"| {ed.dst}')
        lines.append("  end")
    lines.append("  classDef router fill:#ffd27f,stroke:#c77800,stroke-width:2px")
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(plan: RepositoryPlan) -> str:
    lines = ["digraph tritonpipeline {", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for i, e in enumerate(plan.ensembles):
        lines.append(f"  subgraph cluster_{i} {{")
        lines.append(f"    label={_dot_quote(f'ensemble {e.name} (fanOut: {e.fan_out})')};")
        nodes, edges = _graph(e, f"e{i}n")
        for n in nodes:
            attrs = {
                "input": "shape=ellipse",
                "output": "shape=ellipse, style=bold",
                "step": "shape=box",
                "router": 'shape=diamond, style=filled, fillcolor="#ffd27f", color="#c77800"',
            }[n.kind]
            lines.append(f"    {n.id} [label={_dot_quote(n.label)}, {attrs}];")
        for ed in edges:
            lines.append(f"    {ed.src} -> {ed.dst} [label={_dot_quote(ed.label)}];")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
