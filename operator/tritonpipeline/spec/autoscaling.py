"""spec.autoscaling and spec.networkPolicy."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    Field,
    field_validator,
)

from . import kubernetes
from .base import URL_RE, AutoscalingEngine, AutoscalingMetric, Rule, _Base, _name_rule

# the HPA compares a target in thousandths in 64 bits (a Quantity's MilliValue): past about 9.2e15 it
# overflows
MAX_TARGET = 10**15


class Autoscaling(_Base):
    min_replicas: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=1, description="Lower bound (<= maxReplicas)."
    )
    max_replicas: Annotated[int, Field(ge=1, le=1000)] = Field(description="Upper bound.")
    metric: AutoscalingMetric = Field(
        default="queueTime",
        description="`queueTime` (avg µs queued per request), `pendingRequests` or `gpuUtilization`.",
    )
    target: Annotated[float, Field(gt=0, le=MAX_TARGET, allow_inf_nan=False)] = Field(
        default=50, description="Target value of the metric per pod."
    )
    engine: AutoscalingEngine = Field(
        default="auto",
        description="`auto`: KEDA where the cluster serves its ScaledObject (and the operator may use it), "
        "else the HPA on prometheus-adapter's custom metrics; the pipeline's status says which and why. "
        "`hpa`: an autoscaling/v2 HPA with a Pods metric served by prometheus-adapter (rules in the chart). "
        "`keda`: a KEDA ScaledObject with a prometheus trigger on the generated query.",
    )
    prometheus_address: Annotated[str, _name_rule(URL_RE, "url")] | None = Field(
        default=None,
        description="Prometheus URL for the KEDA trigger; absent: the operator's "
        "`TRITONPIPELINE_PROMETHEUS_ADDRESS`. An address the author chooses is used only where the author "
        "may create ScaledObjects or an admin allows it (docs/concepts/security.md).",
    )
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] | None = Field(
        default=None,
        description="The HPA's `behavior.scaleDown.stabilizationWindowSeconds` (also through KEDA): how long "
        "load must stay low before pods are removed; absent: the HPA's 300. A stateful pipeline never gets "
        "less than its longest sequence idle time.",
    )

    RULES = (
        Rule(
            lambda a: a.min_replicas <= a.max_replicas,
            "self.minReplicas <= self.maxReplicas",
            "minReplicas must be <= maxReplicas",
            ".minReplicas",
        ),
    )

    @field_validator("target", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class NetworkPolicy(_Base):
    """Who may reach the pipeline's pods: NetworkPolicy peers (podSelector, namespaceSelector, ipBlock).
    Unset: the pods of the pipeline's namespace; an empty list: nobody."""

    inference: list[Annotated[dict[str, Any], kubernetes.KubernetesType("NetworkPolicyPeer")]] | None = Field(
        default=None,
        description="NetworkPolicy peers that may reach HTTP 8000 and gRPC 8001; absent: the pods of the "
        "pipeline's namespace; `[]`: nobody.",
    )
    metrics: list[Annotated[dict[str, Any], kubernetes.KubernetesType("NetworkPolicyPeer")]] | None = Field(
        default=None,
        description="NetworkPolicy peers that may scrape metrics on 8002; absent: the pods of the pipeline's "
        "namespace; `[]`: nobody.",
    )

    @field_validator("inference", "metrics")
    @classmethod
    def _peers(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        return value if value is None else kubernetes.passed_through(value, kubernetes.peers)
