"""Operator settings, read once at start-up from flags and environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass

GROUP = "serving.tritonpipeline.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"  # a TritonPipeline's apiVersion
PLURAL = "tritonpipelines"
KIND = "TritonPipeline"
# the operator's name: its field manager, the value of the managed-by label and the source of its events
OPERATOR_NAME = "tritonpipeline-operator"
FIELD_MANAGER = OPERATOR_NAME
DEFAULT_ASSEMBLER_IMAGE = "ghcr.io/tritonpipeline/operator:0.1.0"
# kube-prometheus-stack's Prometheus Service when installed in the `monitoring` namespace
DEFAULT_PROMETHEUS_ADDRESS = "http://prometheus-operated.monitoring.svc:9090"
# largest ConfigMap payload before the generated repository is split (the API limit is 1 MiB)
DEFAULT_CONFIGMAP_MAX_BYTES = 900 * 1024
DEFAULT_PEERING_LIFETIME_SECONDS = 15


@dataclass(frozen=True)
class Settings:
    """What the operator needs besides the CRs themselves."""

    # image of the init container that assembles the model repository (this package's image)
    assembler_image: str = DEFAULT_ASSEMBLER_IMAGE
    # namespaces to watch; empty = cluster-wide
    namespaces: tuple[str, ...] = ()
    # seconds between drift repairs of each pipeline
    resync_seconds: float = 60.0
    configmap_max_bytes: int = DEFAULT_CONFIGMAP_MAX_BYTES
    field_manager: str = FIELD_MANAGER
    # Prometheus that KEDA ScaledObjects query, unless a pipeline sets autoscaling.prometheusAddress
    prometheus_address: str = DEFAULT_PROMETHEUS_ADDRESS
    # pull secrets of the assembler image (the chart's imagePullSecrets), added to every Triton pod
    assembler_pull_secrets: tuple[str, ...] = ()
    # longest watch request; the apiserver ends it then and kopf reopens it
    watch_timeout_seconds: int = 270
    # liveness fails when a watch stream has not (re)connected for this long (default: timeout + 60)
    watch_stale_seconds: float = 330.0
    # serve /metrics and /readyz here (http://HOST:PORT); empty: not served
    metrics_url: str = ""
    # seconds between reads of the pipelines' pod metrics and autoscalers into their status; 0: never
    status_poll_seconds: float = 30.0
    # the operator's own namespace and pod labels (the chart sets them): a pipeline's NetworkPolicy lets
    # these pods read metrics on 8002 for the status poll; empty: not added
    operator_namespace: str = ""
    operator_labels: tuple[tuple[str, str], ...] = ()
    # the cluster admin's grants to whoever may create TritonPipelines (kube/checks.py, privilege_problems):
    # securityContexts beyond Pod Security "restricted" (in every namespace, or only in those listed);
    # service accounts other than the namespace's default (`NAME`, `NAMESPACE/NAME` or `*`); registries
    # images may come from (empty: any)
    allow_privileged: bool = False
    privileged_namespaces: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    allowed_image_registries: tuple[str, ...] = ()
    # pipelines whose pods run an earlier operator's rendering (kube/pinning.py) rolled to this one's, this
    # many at a time, each until its rollout completes; 0: none (each waits for its spec to change or for
    # its roll annotation)
    roll_outdated: int = 0
    # the name of kopf's peering object the replicas share (kube/peering.py: the oldest live replica
    # reconciles, every replica serves the webhook); empty: this process runs alone (no peering)
    peering: str = ""
    # seconds a replica's peering entry lives without a keep-alive: how long a killed active replica
    # keeps the standby waiting
    peering_lifetime_seconds: int = DEFAULT_PEERING_LIFETIME_SECONDS

    @classmethod
    def from_env(cls, namespaces: tuple[str, ...] = (), metrics_url: str | None = None) -> Settings:
        """The settings in the environment; `namespaces` and `metrics_url` (flags) override theirs."""
        env = os.environ
        watch = int(env.get("TRITONPIPELINE_WATCH_TIMEOUT_SECONDS", "270"))
        ns = namespaces or tuple(n for n in env.get("TRITONPIPELINE_NAMESPACES", "").split(",") if n)
        return cls(
            assembler_image=env.get("TRITONPIPELINE_ASSEMBLER_IMAGE", DEFAULT_ASSEMBLER_IMAGE),
            namespaces=ns,
            resync_seconds=float(env.get("TRITONPIPELINE_RESYNC_SECONDS", "60")),
            configmap_max_bytes=int(
                env.get("TRITONPIPELINE_CONFIGMAP_MAX_BYTES", str(DEFAULT_CONFIGMAP_MAX_BYTES))
            ),
            prometheus_address=env.get("TRITONPIPELINE_PROMETHEUS_ADDRESS", DEFAULT_PROMETHEUS_ADDRESS),
            # the names of Secrets, not secrets: named so that linters' secret-in-env checks do not take
            # it for one
            assembler_pull_secrets=_items(env.get("TRITONPIPELINE_ASSEMBLER_IMAGE_PULL_REFS", "")),
            watch_timeout_seconds=watch,
            metrics_url=env.get("TRITONPIPELINE_METRICS_URL", "") if metrics_url is None else metrics_url,
            watch_stale_seconds=float(env.get("TRITONPIPELINE_WATCH_STALE_SECONDS", str(watch + 60))),
            status_poll_seconds=float(env.get("TRITONPIPELINE_STATUS_POLL_SECONDS", "30")),
            operator_namespace=env.get("TRITONPIPELINE_OPERATOR_NAMESPACE", ""),
            operator_labels=_labels(env.get("TRITONPIPELINE_OPERATOR_LABELS", "")),
            allow_privileged=env.get("TRITONPIPELINE_ALLOW_PRIVILEGED", "").lower() in ("1", "true", "yes"),
            privileged_namespaces=_items(env.get("TRITONPIPELINE_PRIVILEGED_NAMESPACES", "")),
            allowed_service_accounts=_items(env.get("TRITONPIPELINE_ALLOWED_SERVICE_ACCOUNTS", "")),
            allowed_image_registries=_items(env.get("TRITONPIPELINE_ALLOWED_IMAGE_REGISTRIES", "")),
            roll_outdated=int(env.get("TRITONPIPELINE_ROLL_OUTDATED", "0")),
            peering=env.get("TRITONPIPELINE_PEERING", ""),
            peering_lifetime_seconds=int(
                env.get("TRITONPIPELINE_PEERING_LIFETIME_SECONDS", str(DEFAULT_PEERING_LIFETIME_SECONDS))
            ),
        )


def _labels(text: str) -> tuple[tuple[str, str], ...]:
    """`k=v,k=v` as sorted pairs (an item without `=` is ignored)."""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return tuple(sorted((k.strip(), v.strip()) for k, v in pairs))


def _items(text: str) -> tuple[str, ...]:
    """A comma-separated list, items stripped, empty ones left out."""
    return tuple(item.strip() for item in text.split(",") if item.strip())
