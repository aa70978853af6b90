"""`tritonpipeline manifests`: the Kubernetes objects the operator applies for each pipeline of a file, as
YAML (to review, diff, or hand to GitOps)."""

from __future__ import annotations

import argparse
import sys
import typing
from dataclasses import replace
from typing import Any

from .. import yamltext
from ..errors import SpecError
from ..settings import Settings
from ..spec import GatewayImplementation
from .arguments import add_file, add_models, add_name
from .common import EXIT_OK, compile_file, select

NAME = "manifests"
EXAMPLES = (
    (
        "sed 's|../model_repository|pvc://models/triton|' examples/fanout.yaml "
        "| tritonpipeline manifests - -n ml",
        "the objects the operator applies for a pipeline whose models are on a PVC",
    ),
    (
        "sed 's|../model_repository|pvc://models/triton|' examples/fanout.yaml "
        "| tritonpipeline manifests - -n ml | kubectl diff -f -",
        "what applying them would change in the cluster",
    ),
)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        NAME,
        help="print the Kubernetes objects the operator applies for FILE (YAML; review, diff, GitOps)",
        description="Print, as a YAML stream, exactly the objects the operator applies for each pipeline "
        "of FILE: ConfigMaps, Deployment, Service, routing objects and the autoscaler. Objects of a "
        "routing provider or of KEDA are included: the operator applies them where the cluster serves "
        "their API (autoscaling.engine auto: the HPA, or the ScaledObject with --autoscaling-engine keda, "
        "as the operator chooses from the cluster). Owner references are left out (they need the stored "
        "CR's uid), and so is the admin-key Secret the operator creates (a key is never printed): without "
        "the operator, create it yourself or name your own with spec.server.adminKeySecretRef. The "
        "operator's settings come from the same environment variables (TRITONPIPELINE_ASSEMBLER_IMAGE, ...).",
    )
    add_file(p)
    add_name(p, "only this TritonPipeline")
    p.add_argument("-n", "--namespace", help="the namespace to render for (default: the CR's, else default)")
    p.add_argument(
        "--gateway-implementation",
        choices=typing.get_args(GatewayImplementation),
        help="with routing.provider gateway-api: whose hash policy to render with the routes, as the "
        "operator would read it from the Gateway's GatewayClass (default: routing.gateway.implementation; "
        "without either, the routes are left out and stderr says so)",
    )
    p.add_argument(
        "--autoscaling-engine",
        choices=("hpa", "keda"),
        help="with autoscaling.engine auto: the autoscaler to render, as the operator chooses it from the "
        "cluster (keda: a ScaledObject, where KEDA is served; hpa, the default: the HPA on "
        "prometheus-adapter's metrics, and stderr says so)",
    )
    add_models(p)
    return p


AUTO_ENGINE_NOTE = (
    "autoscaling.engine auto: rendered the HPA on prometheus-adapter's metrics; the operator makes a KEDA "
    "ScaledObject instead where the cluster serves KEDA (--autoscaling-engine keda renders it)"
)


def execute(args: argparse.Namespace) -> int:
    """The Kubernetes objects the operator applies for each pipeline of FILE (or --name), as YAML."""
    from ..compiler import compile_pipeline
    from ..compiler.router_choice import choose_router
    from ..render import autoscaling_objects
    from ..render.manifests import render_children, with_engine
    from ..render.routing_objects import routing_children
    from ..spec import parse_pipeline

    settings = Settings.from_env()  # the operator's settings come from the same variables
    compiled = compile_file(args.file, models=args.models, settings=settings)
    chosen = compiled if args.name is None else [select(compiled, args.name, args.file)]
    objects: list[dict[str, object]] = []
    for c in chosen:
        tp, artifacts = c.pipeline, c.artifacts
        if args.namespace:
            doc = tp.model_dump(mode="json", by_alias=True, exclude_none=True)
            doc["metadata"] = {"name": tp.name, "namespace": args.namespace}
            tp = parse_pipeline(doc, args.file)
        # the routers' backend as the operator chooses it (its router setting from the same variable)
        artifacts = compile_pipeline(tp, router=choose_router(tp, settings.router))
        try:
            children = render_children(tp, artifacts, settings)
        except SpecError as exc:
            raise SpecError(exc.problems, args.file) from None
        if children.routing.gateway_pending and args.gateway_implementation:
            routing = routing_children(tp, settings, args.gateway_implementation)
            children = replace(children, routing=routing)
        if children.routing.gateway_pending:
            print(
                f"note: {tp.name}: routes left out: {children.routing.description}; pass "
                "--gateway-implementation to render them",
                file=sys.stderr,
            )
        if autoscaling_objects.may_choose_keda(tp):  # engine auto: as the operator would choose it
            engine: autoscaling_objects.Engine = "keda" if args.autoscaling_engine == "keda" else "hpa"
            children = with_engine(children, engine)
            if args.autoscaling_engine is None:
                print(f"note: {tp.name}: {AUTO_ENGINE_NOTE}", file=sys.stderr)
        objects += [*children.all(), *children.routing.provider_objects]
        objects += [children.scaled_object] if children.scaled_object else []
    sys.stdout.write(yamltext.dump_all(objects))
    return EXIT_OK
