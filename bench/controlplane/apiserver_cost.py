"""What one large write costs the kube-apiserver itself, by object kind and shape: the part of a hostile
tenant's storm (bench/controlplane/tenants.py) that no operator can take away.

Each shape is a server-side dry-run create sent REPEAT times (after one unmeasured) to a namespace no
operator watches; the apiserver's CPU seconds (user + system, from /proc) per request and per MB of body
are reported with the answer's status (a refused write costs its decoding, defaulting, field management
and validation all the same). The bodies are near the apiserver's request limit of 3 MiB where the shape
allows, so the worst shape's cost per request is what one write can cost:

    pipeline_valid       bench/controlplane/workload.large_doc at the storm's size: valid, 0.9 MB
    pipeline_models      spec.models as a list of the smallest entries (past the list's maximum: refused)
    pipeline_args        spec.server.args as a list of short strings
    pipeline_tolerations spec.server.tolerations (a pass-through Kubernetes type) of small entries
    deployment           a Deployment whose containers carry long env lists: what any tenant that may
                         create Deployments can send
    configmap            one string of the same size: an object with no schema to walk

The pipeline shapes are measured twice, under the CRD as generated and under the same CRD with the
list-maps it had before (models, pipelines and their tensors keyed by name: `*_list_maps`), side by side.
"""

from __future__ import annotations

import copy
import http.client
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from harness.controlplane import ControlPlane
from harness.kubeapi import wait_established
from tritonpipeline.kube.api_client import Kube, path
from tritonpipeline.render.crd import crd
from tritonpipeline.settings import KIND

from .process import proc_stat
from .workload import API, HUGE, cluster_doc, large_doc

REPEAT = 4
CRD_SETTLE = 3.0  # seconds after Established before the apiserver serves the new schema everywhere
TARGET_BYTES = 2_800_000  # under the apiserver's 3 MiB request-body limit, with room for the envelope


def _filled(make: Callable[[int], Any], envelope: int = 0) -> list[Any]:
    """Items make(0), make(1), ... until their JSON reaches TARGET_BYTES less `envelope`."""
    items: list[Any] = []
    size = envelope
    while size < TARGET_BYTES:
        item = make(len(items))
        items.append(item)
        size += len(json.dumps(item)) + 2
    return items


def _pipeline(namespace: str, edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = cluster_doc("cost", namespace)
    edit(doc["spec"])
    return doc


def shapes(namespace: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """name: (collection path, body) of each shape."""
    pipelines = path(API, KIND, namespace)

    def models(spec: dict[str, Any]) -> None:
        spec["models"] += _filled(lambda i: {"name": f"m{i}", "backend": "python"})

    def args(spec: dict[str, Any]) -> None:
        spec["server"]["args"] = _filled(lambda i: f"--log-verbose={i % 2}")

    def tolerations(spec: dict[str, Any]) -> None:
        spec["server"]["tolerations"] = _filled(lambda i: {"key": f"k{i}", "operator": "Exists"})

    def container(i: int) -> dict[str, Any]:
        env = [{"name": f"E{j}", "value": str(j)} for j in range(200)]
        return {"name": f"c{i}", "image": "busybox:1.36", "env": env}

    containers = _filled(container)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "cost", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "cost"}},
            "template": {"metadata": {"labels": {"app": "cost"}}, "spec": {"containers": containers}},
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cost", "namespace": namespace},
        "data": {"blob": "x" * TARGET_BYTES},
    }
    return {
        "pipeline_valid": (pipelines, large_doc("cost", namespace, **HUGE)),
        "pipeline_models": (pipelines, _pipeline(namespace, models)),
        "pipeline_args": (pipelines, _pipeline(namespace, args)),
        "pipeline_tolerations": (pipelines, _pipeline(namespace, tolerations)),
        "deployment": (f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment),
        "configmap": (f"/api/v1/namespaces/{namespace}/configmaps", configmap),
    }


def with_list_maps(definition: dict[str, Any]) -> dict[str, Any]:
    """The CRD with its spec's named lists keyed by name (x-kubernetes-list-type map), as before."""
    definition = copy.deepcopy(definition)
    spec = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    named = [spec["properties"][lst] for lst in ("models", "pipelines")]
    named += [entry["items"]["properties"][io] for entry in named[:2] for io in ("inputs", "outputs")]
    for schema in named:
        schema.update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    return definition


def measure(cp: ControlPlane, kube: Kube, namespace: str, repeat: int = REPEAT) -> dict[str, dict[str, Any]]:
    """The apiserver's CPU per dry-run create of each shape (the apiserver otherwise idle); the CRD is
    generated's again at the end."""
    out = _measure(cp, namespace, shapes(namespace), repeat)
    pipelines = {k: v for k, v in shapes(namespace).items() if k.startswith("pipeline_")}
    try:
        _install(kube, with_list_maps(crd()))
        before = _measure(cp, namespace, pipelines, repeat, "_list_maps")
        out |= {k + "_list_maps": v for k, v in before.items()}
    finally:
        _install(kube, crd())
    return out


def _install(kube: Kube, definition: dict[str, Any]) -> None:
    kube.apply(definition)
    wait_established(kube, definition["metadata"]["name"])
    time.sleep(CRD_SETTLE)


def _measure(
    cp: ControlPlane,
    namespace: str,
    todo: dict[str, tuple[str, dict[str, Any]]],
    repeat: int,
    suffix: str = "",
) -> dict[str, dict[str, Any]]:
    url = urllib.parse.urlsplit(cp.url)
    assert url.hostname is not None
    pid = cp.pids()["kube-apiserver"]
    out: dict[str, dict[str, Any]] = {}
    for name, (collection, doc) in todo.items():
        body = json.dumps(doc).encode()
        conn = http.client.HTTPSConnection(url.hostname, url.port, context=cp.ssl_context(), timeout=120)
        statuses: set[int] = set()
        try:
            for i in range(repeat + 1):
                if i == 1:  # the first one warms the apiserver's caches for this kind
                    cpu0 = proc_stat(pid)["cpu_s"]
                conn.request("POST", f"{collection}?dryRun=All", body, {"Content-Type": "application/json"})
                answer = conn.getresponse()
                answer.read()
                statuses.add(answer.status)
            cpu = (proc_stat(pid)["cpu_s"] - cpu0) / repeat
        finally:
            conn.close()
        out[name] = {
            "bytes": len(body),
            "http_status": sorted(statuses),
            "cpu_s_per_request": round(cpu, 3),
            "cpu_s_per_mb": round(cpu / len(body) * 1e6, 3),
        }
        print(
            f"apiserver cost {name + suffix:<31}: {len(body) / 1e6:.2f} MB, HTTP {sorted(statuses)}, "
            f"{cpu:.3f} CPU s per request, {cpu / len(body) * 1e6:.3f} per MB",
            flush=True,
        )
    return out
