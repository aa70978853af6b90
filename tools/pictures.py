"""The docs' pictures, drawn from the code when the site is built (tools/mkdocs_hooks.py) and when
`make generate` writes README.md's: never pasted, so they cannot drift from what the compiler and the
operator do.

- `graph FILE`: the compiled graph of a pipeline file (`tritonpipeline graph`'s Mermaid; routers marked);
- `flow FILE`: how one request, and every chunk of one sequence, flow from the client through the
  Gateway to one replica, with the names of the objects the operator renders for that file.

A Markdown page asks for one with a comment on a line of its own:
`<!-- picture: graph examples/fanout.yaml -->`.
"""

from __future__ import annotations

import re
from pathlib import Path

from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.visualize import to_mermaid
from tritonpipeline.render.meta import GRPC_PORT
from tritonpipeline.render.routing_objects import routing_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import GatewayImplementation, TritonPipeline, load_file

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- picture: (graph|flow) (\S+) -->$", re.MULTILINE)
# the implementation the flow is drawn for (its policy object is the one named in the picture)
FLOW_IMPLEMENTATION: GatewayImplementation = "envoy-gateway"


def _pipelines(path: str) -> list[TritonPipeline]:
    return load_file(str(ROOT / path))


def graph(path: str) -> str:
    """The compiled graph of every pipeline in the file, as `tritonpipeline graph` draws it."""
    return "".join(to_mermaid(compile_pipeline(tp).plan) for tp in _pipelines(path))


def flow(path: str) -> str:
    """A Mermaid sequence diagram: a sequence's chunks through the Gateway's routes and hash policy to one
    replica, whose sequence batcher keeps the state; the object names are the rendered ones."""
    tp = _pipelines(path)[0]
    routing = tp.spec.routing
    children = routing_children(tp, Settings(), FLOW_IMPLEMENTATION)
    kinds = {o["kind"]: o["metadata"]["name"] for o in children.provider_objects}
    if routing.gateway is None or not {"GRPCRoute", "BackendTrafficPolicy"} <= set(kinds):
        raise ValueError(f"{path}: the flow picture needs a Header pipeline routed through a Gateway")
    plan = compile_pipeline(tp).plan
    ensemble = plan.ensembles[0]
    stateful = [m.name for m in tp.spec.models if m.sequence_batching is not None]
    steps = " -> ".join(s.name for s in ensemble.steps)
    gateway = f"{routing.gateway.namespace}/{routing.gateway.name}"
    header = routing.header
    return (
        "\n".join(
            [
                "sequenceDiagram",
                "  participant C as client (tritonpipeline.client)",
                f"  participant G as Gateway {gateway}",
                f"  participant A as pod A of Deployment {tp.name}",
                f"  participant B as pod B of Deployment {tp.name}",
                f"  C->>G: chunk 1 of sequence 42 (gRPC stream to {routing.host}:443, {header}: 42, START)",
                f"  Note over G: GRPCRoute {kinds['GRPCRoute']} to Service {tp.name}:{GRPC_PORT};<br/>"
                f"BackendTrafficPolicy {kinds['BackendTrafficPolicy']}: consistent hash of {header}",
                "  G->>A: hash(42) picks pod A",
                f"  Note over A: ensemble {ensemble.name}: {steps};<br/>"
                f"the sequence batcher of {', '.join(stateful) or 'each model'} keeps sequence 42's state",
                "  A-->>C: answer 1",
                f"  C->>G: chunk 2 ({header}: 42)",
                "  G->>A: the same hash, the same pod",
                "  A-->>C: answer 2",
                f"  C->>G: chunk 1 of sequence 7 ({header}: 7, START)",
                "  G->>B: hash(7) picks pod B",
                "  B-->>C: answer 1 of sequence 7",
                f"  C->>G: last chunk of sequence 42 ({header}: 42, END)",
                "  G->>A: pod A ends sequence 42 and frees its slot",
                "  A-->>C: the final answer",
            ]
        )
        + "\n"
    )


def render(kind: str, path: str) -> str:
    """One picture as a fenced Mermaid block."""
    text = graph(path) if kind == "graph" else flow(path)
    return f"```mermaid\n{text.rstrip()}\n```"


def expand(markdown: str) -> str:
    """Markdown with each picture marker followed by the picture it asks for (markers are kept, so the
    text can be expanded again: a picture already drawn after a marker is replaced)."""
    fenced = re.compile(r"(^<!-- picture: (graph|flow) (\S+) -->\n)(```mermaid\n.*?\n```\n?)?", re.M | re.S)
    return fenced.sub(lambda m: f"{m[1]}{render(m[2], m[3])}\n", markdown)
