"""What the benchmark applies: examples/fanout.yaml as a cluster object (one per name), the children
the operator renders for it, and one namespace per path."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from harness.paths import ROOT
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.kube.manifests import render_children
from tritonpipeline.settings import GROUP, VERSION, Settings
from tritonpipeline.spec import parse_pipeline

EXAMPLE = ROOT / "examples" / "fanout.yaml"
MODEL_REPOSITORY = "pvc://models/triton"
API = f"{GROUP}/{VERSION}"
# one namespace per path; the operator watches only its own
NAMESPACES = {"operator": "bench-operator", "floor": "bench-floor", "cr_floor": "bench-cr-floor"}
OP_NS = NAMESPACES["operator"]
MODES = ("floor", "cr_floor", "operator")
CHILD_KINDS = (("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Service"))
FIELD_MANAGER = "tritonpipeline-bench"


def now() -> float:
    return time.perf_counter()


def api_client(kubeconfig: Path, pool: int) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return k8s.ApiClient(configuration)


def cluster_doc(name: str, namespace: str) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["modelRepository"]["uri"] = MODEL_REPOSITORY
    return doc


def child_keys(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of every child the operator renders for this CR."""
    tp = parse_pipeline(copy.deepcopy(doc))
    children = render_children(tp, compile_pipeline(tp), Settings())
    return {(o["kind"], o["metadata"]["name"]) for o in children.all()}
