"""`tritonpipeline run`: the Kubernetes operator (kopf), on the cluster of KUBECONFIG or the pod's
service account."""

from __future__ import annotations

import argparse
import getpass
import os
import random
import socket
import time
from dataclasses import replace
from typing import Any

from .. import extras
from ..runtime.logs import FORMATS
from ..settings import BAD_VALUE, Settings, SettingsError, env_name
from ..spec import DNS_LABEL_RE
from .arguments import endpoint_url
from .common import EXIT_INVALID, EXIT_OK, error

NAME = "run"
EXAMPLES = (
    ("tritonpipeline run", "run the operator on every namespace (KUBECONFIG or the pod's account)"),
    (
        "tritonpipeline run -n team-a,team-b --metrics http://0.0.0.0:8081",
        "on two namespaces, /metrics and /readyz on port 8081",
    ),
)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(NAME, help="run the Kubernetes operator")
    p.add_argument("-n", "--namespace", action="append", help="watch this namespace (repeat); default: all")
    p.add_argument(
        "--liveness",
        metavar="URL",
        type=endpoint_url,
        help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz: fails when a watch stream is stuck",
    )
    p.add_argument(
        "--metrics",
        metavar="URL",
        type=endpoint_url,
        help="serve Prometheus /metrics and /readyz here, e.g. http://0.0.0.0:8081",
    )
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default="full",
        help="full (default): UTC time, level, logger, [namespace/name], message; json: one object a line; "
        "plain: level, [namespace/name], message",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="DEBUG lines: what each reconcile did")
    return p


NAMESPACES_ENV = env_name(Settings, "namespaces")
NOT_A_NAMESPACE = "{name!r} is not a namespace name (lowercase letters, digits and '-', at most 63)"


def check_namespaces(names: tuple[str, ...], source: str) -> None:
    """Raise SettingsError naming `source` (the flag or the variable) for a name no namespace can have:
    `-n a,b` once ran with one namespace "a,b", and its webhook registration failed every 10 s."""
    for name in names:
        if not DNS_LABEL_RE.match(name):
            why = NOT_A_NAMESPACE.format(name=name)
            raise SettingsError(BAD_VALUE.format(env=source, text=",".join(names), why=why))


def execute(args: argparse.Namespace) -> int:
    """Run the operator (kopf) against the cluster in KUBECONFIG or the in-cluster service account."""
    extras.need("operator", "tritonpipeline run")
    import kopf
    from kubernetes.config import ConfigException

    from .. import handlers  # noqa: F401 - registers the handlers
    from ..kube.api_client import Kube, KubeError, api_client
    from ..render import peering
    from ..render.security_context import OPENSHIFT_SCC_API
    from ..runtime import kopf_fixes
    from ..runtime.logs import configure
    from ..runtime.memory import limit_malloc_arenas
    from ..runtime.state import OperatorState

    limit_malloc_arenas()  # before kopf's and the API client's threads start
    kopf_fixes.install()  # no JSON deeper than jsontext.MAX_DEPTH; no copy for an empty patch
    settings = Settings.from_env(namespaces=tuple(args.namespace or ()), metrics_url=args.metrics)
    check_namespaces(settings.namespaces, "--namespace" if args.namespace else NAMESPACES_ENV)
    configure(args.log_format, args.verbose)
    try:
        kube = Kube(api_client(), settings.field_manager)
    except ConfigException as exc:
        error(f"no Kubernetes credentials (in-cluster or KUBECONFIG): {exc}")
        return EXIT_INVALID
    if settings.adapt_security_context == "auto":  # OpenShift: its SCC assigns the pods' ids
        try:
            openshift = kube.resource_exists(*OPENSHIFT_SCC_API)
        except KubeError as exc:  # retried: the pod restarts and asks again rather than guess
            api = "/".join(OPENSHIFT_SCC_API)
            error(f"cannot tell whether the cluster serves {api}: {exc}")
            return EXIT_INVALID
        settings = replace(settings, adapt_security_context="force" if openshift else "disabled")
    state = OperatorState(settings, kube)
    # kopf's identity convention (POD_ID: the chart sets it to the pod's name)
    state.identity = os.environ.get("POD_ID") or f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}"
    state.priority = peering.priority(time.time(), random.randrange(1000))
    try:
        kopf.run(
            standalone=not settings.peering,
            peering_name=settings.peering or None,
            priority=state.priority,
            identity=state.identity,  # type: ignore[arg-type]  # kopf's Identity: a NewType of str
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=args.liveness,
            memo=state,
        )
    except Exception as exc:  # kopf's ActivityError (not exported): a start-up handler failed
        outcomes = getattr(exc, "outcomes", None)
        if not isinstance(outcomes, dict):
            raise
        failed = [str(o.exception) for o in outcomes.values() if getattr(o, "exception", None) is not None]
        error(f"the operator cannot start: {'; '.join(failed) or exc}")
        return EXIT_INVALID
    return EXIT_OK
