"""What the benchmark applies: examples/fanout.yaml as a cluster object (one per name), the children
the operator renders for it, one namespace per path, and the large pipelines of the webhook scenario."""

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
from tritonpipeline.compiler.router_choice import choose_router
from tritonpipeline.render.manifests import Children, render_children
from tritonpipeline.settings import GROUP, VERSION, Settings
from tritonpipeline.spec import parse_pipeline

EXAMPLE = ROOT / "examples" / "fanout.yaml"
MODEL_REPOSITORY = "pvc://models/triton"
API = f"{GROUP}/{VERSION}"
# one namespace per path; the operator watches only its own
NAMESPACES = {"operator": "bench-operator", "floor": "bench-floor", "cr_floor": "bench-cr-floor"}
OP_NS = NAMESPACES["operator"]
MODES = ("floor", "cr_floor", "operator")
# the webhook scenario's namespace: its own operator (with the admission webhook) watches only this one
WEBHOOK_NS = "bench-webhook"
CHILD_KINDS = (
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
)
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


def render(doc: dict[str, Any], settings: Settings | None = None) -> Children:
    """The children of this CR as the operator renders them: parse, compile (with the router the
    operator chooses) and render, with the operator's default settings."""
    settings = settings or Settings()
    tp = parse_pipeline(copy.deepcopy(doc))
    return render_children(tp, compile_pipeline(tp, router=choose_router(tp, settings.router)), settings)


def child_keys(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of every child the operator renders for this CR."""
    return {(o["kind"], o["metadata"]["name"]) for o in render(doc).all()}


# the large pipeline of the webhook scenario: MODELS models of TENSORS inputs and outputs each, and
# PIPELINES chains of STEPS steps over them (the spec's limits: 256 models, 64 pipelines, 128 steps)
LARGE_MODELS, LARGE_PIPELINES, LARGE_STEPS, LARGE_TENSORS = 250, 8, 120, 4
# the hostile tenant's pipeline (tenants.py, apiserver_cost.py): 0.9 MB, valid, ~1 s to check here
HUGE = {"models": 256, "pipelines": 16, "steps": 128, "tensors": 12}


def large_doc(
    name: str,
    namespace: str,
    models: int = LARGE_MODELS,
    pipelines: int = LARGE_PIPELINES,
    steps: int = LARGE_STEPS,
    tensors: int = LARGE_TENSORS,
) -> dict[str, Any]:
    """A valid pipeline of a few hundred KB: examples/fanout.yaml's server and model repository, with
    `models` Python-backend models ([16] FP32 tensors X0.. -> Y0..) and `pipelines` chains of `steps`
    steps over them (chain p starts at model 7p)."""
    doc = cluster_doc(name, namespace)

    def tensor(prefix: str) -> list[dict[str, Any]]:
        return [{"name": f"{prefix}{j}", "dataType": "FP32", "dims": [16]} for j in range(tensors)]

    names = [f"stage_{i:03d}" for i in range(models)]
    doc["spec"]["models"] = [
        {
            "name": model,
            "backend": "python",
            "maxBatchSize": 8,
            "inputs": tensor("X"),
            "outputs": tensor("Y"),
            "instances": [{"kind": "GPU", "count": 1}],
            "parameters": {"stage": str(i)},
        }
        for i, model in enumerate(names)
    ]
    chains = []
    for p in range(pipelines):
        chain, source = [], {f"X{j}": f"inputs.IN{j}" for j in range(tensors)}
        for i in range(steps):
            step = f"s{i:03d}"
            chain.append({"name": step, "model": names[(7 * p + i) % models], "inputs": source})
            source = {f"X{j}": f"{step}.Y{j}" for j in range(tensors)}
        last = f"s{steps - 1:03d}"
        chains.append(
            {
                "name": f"chain_{p:02d}",
                "inputs": tensor("IN"),
                "steps": chain,
                "outputs": [{"name": f"OUT{j}", "from": f"{last}.Y{j}"} for j in range(tensors)],
            }
        )
    doc["spec"]["pipelines"] = chains
    return doc
