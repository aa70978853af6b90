"""Mermaid and Graphviz DOT views of compiled ensembles, with inserted routers marked. A pipeline with
conditions is drawn whole, its parts' ensembles joined again, each condition a dashed edge from the step
that computes its tensor into each step of the branch it opens."""

from __future__ import annotations

from dataclasses import dataclass

from .plan_types import INPUTS, LATEST_VERSION, EnsemblePlan, OrchestratorPlan, RepositoryPlan, StepPlan


@dataclass(frozen=True)
class _Edge:
    src: str
    dst: str
    label: str
    condition: bool = False  # a `when`: drawn dashed


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


class _Drawing:
    """Nodes and edges of one subgraph, node ids `PREFIX<k>`."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[_Node] = []
        self.ids: dict[tuple[str, str], str] = {}
        self.edges: list[_Edge] = []

    def node(self, kind: str, name: str, label: str) -> str:
        key = (kind, name)
        if key not in self.ids:
            self.ids[key] = f"{self.prefix}{len(self.ids)}"
            self.nodes.append(_Node(self.ids[key], label, kind))
        return self.ids[key]

    def ensemble(self, e: EnsemblePlan, writers: dict[str, tuple[str, str]]) -> list[str]:
        """Draw e's steps and the edges into them; `writers`: ensemble tensor -> (node, its output name),
        filled with what e's steps write. Returns the nodes of e's steps that read from outside."""
        routers = {r.name for r in e.routers}
        outside = dict(writers)
        for st in e.steps:
            kind = "router" if st.name in routers else "step"
            nid = self.node(kind, st.name, f"router {st.name}" if kind == "router" else _step_label(st))
            for out, tensor in st.output_map:
                writers[tensor] = (nid, out)
        entries = []
        for st in e.steps:
            nid = self.ids[("router" if st.name in routers else "step", st.name)]
            for inp, tensor in st.input_map:
                src, out = writers[tensor]
                if tensor in outside and outside[tensor] == writers[tensor]:
                    entries.append(nid)
                self.edges.append(_Edge(src, nid, inp if out == inp else f"{out} -> {inp}"))
        return list(dict.fromkeys(entries))


def _graph(e: EnsemblePlan, prefix: str) -> tuple[list[_Node], list[_Edge]]:
    d = _Drawing(prefix)
    writers: dict[str, tuple[str, str]] = {}
    for name, _ in e.inputs:
        writers[name] = (d.node("input", name, f"input {name}"), name)
    d.ensemble(e, writers)
    for name, _ in e.outputs:
        src, out = writers[name]
        d.edges.append(_Edge(src, d.node("output", name, f"output {name}"), out))
    return d.nodes, d.edges


def _conditional_graph(
    o: OrchestratorPlan, parts: dict[str, EnsemblePlan], prefix: str
) -> tuple[list[_Node], list[_Edge]]:
    """A pipeline with conditions, its parts' ensembles joined by the references that name their
    tensors; each condition a dashed edge into every step of its branch that reads from outside it."""
    d = _Drawing(prefix)
    writers: dict[str, tuple[str, str]] = {}  # a reference -> (node, its output name)
    for name, _ in o.inputs:
        writers[f"{INPUTS}.{name}"] = (d.node("input", name, f"input {name}"), name)
    for part in o.parts:
        e = parts[part.model]
        inner = {ref: writers[ref] for ref in part.inputs if ref in writers}
        entries = d.ensemble(e, inner)
        if part.when is not None and part.when[0] in writers:
            ref, guard = part.when
            src, name = writers[ref]
            label = guard.said().replace(guard.tensor, name, 1)
            d.edges += [_Edge(src, nid, label, condition=True) for nid in entries]
        for ref in part.outputs:
            writers[ref] = inner[ref]
    for out in o.outputs:
        dst = d.node(
            "output",
            out.name,
            f"output {out.name}" + (f" (default {out.default!r})" if out.default is not None else ""),
        )
        for k, ref in enumerate(out.sources):
            src, name = writers[ref]
            d.edges.append(_Edge(src, dst, name if k == 0 else f"{name} (or)"))
    return d.nodes, d.edges


def _drawn(plan: RepositoryPlan) -> list[tuple[str, str, str, list[_Node], list[_Edge]]]:
    """(id, Mermaid title, DOT title, nodes, edges) of each subgraph: every ensemble, but the parts of a
    pipeline with conditions, drawn with their pipeline."""
    by_name = {e.name: e for e in plan.ensembles}
    parts = {p.model for o in plan.orchestrators for p in o.parts}
    drawn = []
    for i, e in enumerate(plan.ensembles):
        if e.name not in parts:
            nodes, edges = _graph(e, f"e{i}n")
            mermaid = f"ensemble {e.name} (fanOut: {e.fan_out}, maxBatchSize: {e.max_batch_size})"
            drawn.append((f"e{i}", mermaid, f"ensemble {e.name} (fanOut: {e.fan_out})", nodes, edges))
    for i, o in enumerate(plan.orchestrators):
        nodes, edges = _conditional_graph(o, by_name, f"o{i}n")
        kind = "conditions, speculative" if o.speculative else "conditions"  # the spec's ask
        title = f"pipeline {o.name} ({kind}, maxBatchSize: {o.max_batch_size})"
        drawn.append((f"o{i}", title, f"pipeline {o.name} ({kind})", nodes, edges))
    return drawn


def _mermaid_text(text: str) -> str:
    """Text for a quoted Mermaid label: `#` and `"` as Mermaid's entity codes (tensor names may hold both)."""
    return text.replace("#", "#35;").replace('"', "#quot;")


def to_mermaid(plan: RepositoryPlan) -> str:
    lines = ["flowchart LR"]
    for gid, title, _, nodes, edges in _drawn(plan):
        lines.append(f'  subgraph {gid}["{_mermaid_text(title)}"]')
        for n in nodes:
            shape = {"input": '(["{}"])', "output": '(["{}"])', "router": '{{"{}"}}', "step": '["{}"]'}[
                n.kind
            ]
            lines.append(f"    {n.id}{shape.format(_mermaid_text(n.label))}")
            if n.kind == "router":
                lines.append(f"    class {n.id} router")
        for ed in edges:
            arrow = "-.->" if ed.condition else "-->"
            lines.append(f'    {ed.src} {arrow}|"{_mermaid_text(ed.label)}"| {ed.dst}')
        lines.append("  end")
    lines.append("  classDef router fill:#ffd27f,stroke:#c77800,stroke-width:2px")
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(plan: RepositoryPlan) -> str:
    lines = ["digraph tritonpipeline {", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for gid, _, title, nodes, edges in _drawn(plan):
        lines.append(f"  subgraph cluster_{gid} {{")
        lines.append(f"    label={_dot_quote(title)};")
        for n in nodes:
            attrs = {
                "input": "shape=ellipse",
                "output": "shape=ellipse, style=bold",
                "step": "shape=box",
                "router": 'shape=diamond, style=filled, fillcolor="#ffd27f", color="#c77800"',
            }[n.kind]
            lines.append(f"    {n.id} [label={_dot_quote(n.label)}, {attrs}];")
        for ed in edges:
            style = ", style=dashed" if ed.condition else ""
            lines.append(f"    {ed.src} -> {ed.dst} [label={_dot_quote(ed.label)}{style}];")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
