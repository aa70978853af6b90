"""Autoscaling on Triton's own metrics (pure): PromQL, the HPA, the KEDA ScaledObject, the
prometheus-adapter rules, and what stateful pipelines need to scale down without cutting sequences.

One function, `expression`, writes every query, so the KEDA trigger, the status message and the chart's
prometheus-adapter rules behind the HPA (charts/triton-pipeline/files/prometheus-adapter-rules.yaml,
written from `adapter_rules_yaml` by `make generate`; a test checks it is current) all compute the same
numbers:

- queueTime: average microseconds a request waits in a model's queue over a window,
  rate(nv_inference_queue_duration_us) / rate(nv_inference_request_success), the rate clamped so an
  idle pod reads 0;
- pendingRequests: nv_inference_pending_request_count, requests waiting to execute (a total);
- gpuUtilization: 100 * nv_gpu_utilization (which Triton reports as a 0..1 fraction), in percent.

Per-model metrics are taken on the composing models only, never on the ensembles: an ensemble request
is pending (and counted) for as long as its steps run, so adding it would count every request twice.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .. import yamltext
from ..compiler import OPEN_STREAMS_FILE, OPEN_STREAMS_LEASE_SECONDS
from ..settings import Settings
from ..spec import AutoscalingMetric, TritonPipeline
from ..triton import tritonserver_options
from ..triton.addresses import IPV4_LOOPBACK, url_host
from .meta import HTTP_PORT, metadata, namespace_of
from .routing_objects import longest_idle_seconds, sequence_models

DEFAULT_WINDOW = "1m"
METRICS: tuple[str, ...] = typing.get_args(AutoscalingMetric)
# the names prometheus-adapter serves them under (custom.metrics.k8s.io), one value per pod
METRIC_NAMES = {
    "queueTime": "triton_queue_time_us",
    "pendingRequests": "triton_pending_requests",
    "gpuUtilization": "triton_gpu_utilization_percent",
}
SOURCE_SERIES = {
    "queueTime": "nv_inference_queue_duration_us",
    "pendingRequests": "nv_inference_pending_request_count",
    "gpuUtilization": "nv_gpu_utilization",
}
PER_MODEL = {"queueTime", "pendingRequests"}  # series with a `model` label (GPU metrics have none)
# how KEDA turns the query's single value into replicas: an average is compared as is (Value:
# replicas * value / target), a total is divided by the target (AverageValue: value / target)
KEDA_METRIC_TYPE = {"queueTime": "Value", "pendingRequests": "AverageValue", "gpuUtilization": "Value"}
SCALED_OBJECT_API = ("keda.sh/v1alpha1", "ScaledObject")
DEFAULT_STABILIZATION_SECONDS = 300  # the HPA's own scale-down default
MAX_STABILIZATION_SECONDS = 3600  # the HPA API's limit
MAX_POLICY_PERIOD_SECONDS = 1800  # the HPA API's limit
TRITON_EXIT_TIMEOUT_SECONDS = 30  # tritonserver's default --exit-timeout-secs
DRAIN_MARGIN_SECONDS = 5
DRAIN_DIR = "/tp/run"
DRAIN_FILE = f"{DRAIN_DIR}/draining"
OPEN_STREAMS_PATH = f"{DRAIN_DIR}/{OPEN_STREAMS_FILE}"  # written by the open-streams model (Stream routing)


# --------------------------------------------------------------------------- PromQL


def ensembles(tp: TritonPipeline) -> list[str]:
    """The ensemble model names (one per pipeline)."""
    return [p.name for p in tp.spec.pipelines]


def exclude_models(names: Sequence[str]) -> str:
    """Label matcher dropping these models (names are Triton-safe: no regex metacharacters but '-')."""
    return f'model!~"{"|".join(names)}"'


def expression(metric: str, selector: str, *, window: str = DEFAULT_WINDOW, by: str = "") -> str:
    """The PromQL for `metric` over the series matched by `selector` (the inside of `{...}`), one value
    per `by` group (`""`: one value for everything matched).

    queueTime divides by the request rate clamped to 1e-9/s, so an idle pod reads 0 rather than NaN
    (0/0); with any traffic in the window the rate is >= 1/window and the clamp changes nothing."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    group = f" by ({by}) " if by else ""
    if metric == "queueTime":
        queued = f"sum{group}(rate(nv_inference_queue_duration_us{{{selector}}}[{window}]))"
        done = f"sum{group}(rate(nv_inference_request_success{{{selector}}}[{window}]))"
        return f"{queued} / clamp_min({done}, 1e-9)"
    if metric == "pendingRequests":
        return f"sum{group}(nv_inference_pending_request_count{{{selector}}})"
    return f"100 * avg{group}(nv_gpu_utilization{{{selector}}})"


def pod_matchers(tp: TritonPipeline, namespace: str | None = None) -> str:
    """The pipeline's Triton pods as Prometheus sees them through the usual Kubernetes relabeling
    (`namespace` and `pod` target labels, as prometheus-operator and prometheus-adapter use): the
    Deployment's pods are named NAME-<pod-template-hash>-<suffix>."""
    ns = namespace or namespace_of(tp)
    return f'namespace="{ns}",pod=~"{tp.name}-[a-z0-9]+-[a-z0-9]+"'


def pipeline_query(
    tp: TritonPipeline,
    metric: str | None = None,
    *,
    namespace: str | None = None,
    window: str = DEFAULT_WINDOW,
) -> str:
    """The one-number query for a whole pipeline (all its pods): what the KEDA trigger evaluates and
    what status shows. queueTime and gpuUtilization are averages, pendingRequests a total."""
    metric = metric or (tp.spec.autoscaling.metric if tp.spec.autoscaling else "queueTime")
    selector = pod_matchers(tp, namespace)
    if metric in PER_MODEL and ensembles(tp):  # models served with no pipeline: every model counts
        selector += "," + exclude_models(ensembles(tp))
    return expression(metric, selector, window=window)


# --------------------------------------------------------------------------- prometheus-adapter


def adapter_rules(window: str = DEFAULT_WINDOW) -> dict[str, Any]:
    """prometheus-adapter `rules` serving METRIC_NAMES per pod. The HPA's metric selector (the ensembles
    excluded with `model NotIn [...]`) reaches the query through `<<.LabelMatchers>>`."""
    rules = []
    for metric in METRICS:
        series = SOURCE_SERIES[metric]
        rules.append(
            {
                "seriesQuery": f'{series}{{namespace!="",pod!=""}}',
                "resources": {
                    "overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
                },
                "name": {"matches": f"^{series}$", "as": METRIC_NAMES[metric]},
                "metricsQuery": expression(metric, "<<.LabelMatchers>>", window=window, by="<<.GroupBy>>"),
            }
        )
    return {"rules": rules}


def adapter_rules_yaml() -> str:
    header = (
        "# prometheus-adapter rules for TritonPipeline autoscaling (HPA engine). Generated from\n"
        "# tritonpipeline.render.autoscaling_objects by `make generate`; a test checks it is current.\n"
        "# Use it as prometheus-adapter's config.yaml (the chart's prometheusAdapter.rulesConfigMap), or\n"
        "# merge `rules` into the prometheus-adapter chart's `rules.custom` (docs/concepts/autoscaling.md).\n"
    )
    return header + yamltext.dump(adapter_rules(), width=200)


# --------------------------------------------------------------------------- stateful pipelines


def open_streams_test(path: str = OPEN_STREAMS_PATH, fresh_seconds: int = OPEN_STREAMS_LEASE_SECONDS) -> str:
    """A shell test that succeeds while the pod serves a stream the client helper registered: the
    open-streams model (compiler/open_streams_model.py) rewrites `path` every second with "COUNT
    UNIX_SECONDS", the streams whose lease has not expired. True while the count is above 0 and was
    written at most `fresh_seconds` ago (an older file, left by a model that stopped, counts as none); a
    missing or malformed file: no stream. Connections that never registered hold nothing."""
    return (
        f'{{ read n t < {path}; }} 2>/dev/null && [ "$n" -gt 0 ] 2>/dev/null && '
        f'[ "$t" -ge $(($(date +%s) - {fresh_seconds})) ] 2>/dev/null'
    )


@dataclass(frozen=True)
class Drain:
    """How a stateful pipeline's pod leaves: preStop makes readiness fail (the drain file) and keeps the
    container serving for `seconds` before tritonserver gets SIGTERM: the sequence idle timeout plus a
    margin, or with `Stream` routing the time proxies take to stop opening connections to it, then as
    long as a sequence stream registered by the client helper is still open there (`open_streams_test`),
    at most `stream_wait_seconds`. The grace period covers that and Triton's own exit timeout."""

    seconds: int
    grace_seconds: int
    stream_wait_seconds: int = 0

    def pre_stop(self) -> list[str]:
        script = f"mkdir -p {DRAIN_DIR} && touch {DRAIN_FILE}; sleep {self.seconds}"
        if self.stream_wait_seconds:
            script += (
                f"; i=0; while [ $i -lt {self.stream_wait_seconds} ] && {open_streams_test()}; "
                "do sleep 1; i=$((i+1)); done"
            )
        return ["/bin/sh", "-c", script]

    @staticmethod
    def readiness(loopback: str = IPV4_LOOPBACK) -> list[str]:
        """Ready while not draining and Triton's HTTP endpoint, asked on `loopback`, says ready."""
        return [
            "/bin/sh",
            "-c",
            f"test ! -e {DRAIN_FILE} && "
            f"exec curl -fsS -m 2 -o /dev/null http://{url_host(loopback)}:{HTTP_PORT}/v2/health/ready",
        ]


# How long a terminating stateless pod keeps serving before tritonserver gets SIGTERM: endpoints
# controllers, kube-proxy and proxies take a few seconds to stop sending it requests, and Triton refuses
# new requests from SIGTERM on (the usual preStop delay of serving stacks).
PRE_STOP_SECONDS = 10


def pre_stop_wait() -> list[str]:
    """A stateless pod's preStop command: wait PRE_STOP_SECONDS. An exec hook, not the `sleep` action:
    that needs Kubernetes 1.30, and older apiservers the chart supports refuse the field."""
    return ["sleep", str(PRE_STOP_SECONDS)]


def exit_timeout_seconds(tp: TritonPipeline) -> int:
    """How long tritonserver waits for in-flight requests after SIGTERM: the user's --exit-timeout-secs
    (in any spelling tritonserver accepts), else its default."""
    flags, _ = tritonserver_options.parse(tp.spec.server.args)
    given = [f.value for f in flags if f.option == "exit-timeout-secs" and f.value is not None]
    return int(given[-1]) if given else TRITON_EXIT_TIMEOUT_SECONDS


def grace_seconds(tp: TritonPipeline, pre_stop: int) -> int:
    """terminationGracePeriodSeconds: the preStop delay, then Triton's exit timeout, plus a margin."""
    return pre_stop + exit_timeout_seconds(tp) + 10


def drain(tp: TritonPipeline) -> Drain | None:
    """None for a stateless pipeline (nothing to drain: the plain HTTP readiness probe is kept)."""
    if not sequence_models(tp):
        return None
    routing = tp.spec.routing
    if routing.session_affinity == "Stream":
        wait = PRE_STOP_SECONDS + routing.stream_drain_seconds
        return Drain(PRE_STOP_SECONDS, grace_seconds(tp, wait), routing.stream_drain_seconds)
    seconds = longest_idle_seconds(tp) + DRAIN_MARGIN_SECONDS
    return Drain(seconds, grace_seconds(tp, seconds))


def behavior(tp: TritonPipeline) -> dict[str, Any] | None:
    """HPA behavior. Stateless: only the user's scale-down stabilization window, if set (else None: the
    HPA's defaults). Stateful: scale down only after load stayed low for the window (the user's, else
    the HPA's default 5 minutes) and never less than the sequence idle timeout, one pod per idle period."""
    auto = tp.spec.autoscaling
    chosen = auto.scale_down_stabilization_seconds if auto else None
    if not sequence_models(tp):
        return None if chosen is None else {"scaleDown": {"stabilizationWindowSeconds": chosen}}
    idle = longest_idle_seconds(tp)
    floor = DEFAULT_STABILIZATION_SECONDS if chosen is None else chosen
    window = min(MAX_STABILIZATION_SECONDS, max(floor, idle))
    period = min(MAX_POLICY_PERIOD_SECONDS, max(60, idle))
    return {
        "scaleDown": {
            "stabilizationWindowSeconds": window,
            "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": period}],
        }
    }


# --------------------------------------------------------------------------- engine

Engine = Literal["hpa", "keda"]  # what actually scales a pipeline (`auto` resolved)
KEDA_API = f"{SCALED_OBJECT_API[1]} ({SCALED_OBJECT_API[0]})"  # as messages name it


def engine_of(tp: TritonPipeline, keda: bool = False) -> Engine | None:
    """The engine that scales the pipeline: the one its spec names, or for `auto` KEDA when `keda` (the
    operator found KEDA served, usable and allowed: `choose`), the HPA otherwise (what `validate` and
    `manifests`, which ask no cluster, render). None without spec.autoscaling."""
    auto = tp.spec.autoscaling
    if auto is None:
        return None
    if auto.engine == "auto":
        return "keda" if keda else "hpa"
    return auto.engine


def may_choose_keda(tp: TritonPipeline) -> bool:
    """Whether the operator chooses the engine (`auto`), so that KEDA may scale the pipeline one day."""
    auto = tp.spec.autoscaling
    return auto is not None and auto.engine == "auto"


@dataclass(frozen=True)
class EngineChoice:
    """The engine the operator chose for a pipeline and why, in words for its status (`why` ends the
    AutoscalingConfigured message's first sentence), and what then scales the pipeline (`scaling`:
    `describe`, for the status and the log)."""

    engine: Engine | None
    why: str = ""
    scaling: str = ""

    @property
    def sentence(self) -> str:
        return f"{self.why}: " if self.why else ""


# why each engine, in the AutoscalingConfigured condition's message
CHOSEN_IN_SPEC = "autoscaling.engine {engine} (set in the spec)"
AUTO_KEDA = f"autoscaling.engine auto chose KEDA: the cluster serves {KEDA_API}"
AUTO_HPA_NO_KEDA = (
    f"autoscaling.engine auto chose the HPA on prometheus-adapter's metrics: the cluster does not serve "
    f"{KEDA_API} (a ScaledObject replaces the HPA once KEDA is installed)"
)
AUTO_HPA_KEDA_OFF = (
    f"autoscaling.engine auto chose the HPA on prometheus-adapter's metrics: the cluster serves {KEDA_API}, "
    "but this operator does not use KEDA (TRITONPIPELINE_USE_KEDA is off: the chart's autoscaling.keda, "
    "which grants it ScaledObjects)"
)
AUTO_HPA_NO_RBAC = (
    f"autoscaling.engine auto chose the HPA on prometheus-adapter's metrics: the cluster serves {KEDA_API}, "
    "but the operator's RBAC does not let it {verbs} scaledobjects.keda.sh in this namespace (grant it, as "
    "the chart's autoscaling.keda does, and a ScaledObject replaces the HPA at the next resync; or set "
    "TRITONPIPELINE_USE_KEDA off)"
)
AUTO_HPA_NOT_REVIEWED = (
    f"autoscaling.engine auto chose the HPA on prometheus-adapter's metrics: the cluster serves {KEDA_API}, "
    "but the ScaledObject is not allowed for this pipeline ({problems})"
)


def choose(
    tp: TritonPipeline,
    served: bool,
    usable: bool = True,
    problems: Sequence[str] = (),
    denied: Sequence[str] = (),
) -> EngineChoice:
    """The engine for the pipeline, and why: the spec's own choice wins; `auto` is KEDA when the cluster
    serves KEDA's ScaledObject (`served`), the operator may use it (`usable`: settings.use_keda; `denied`:
    the verbs on ScaledObjects its RBAC denies it in the namespace) and nothing forbids this pipeline's
    ScaledObject (`problems`: the access review's refusals of it, issue 54), else the HPA on
    prometheus-adapter's custom metrics."""
    auto = tp.spec.autoscaling
    if auto is None:
        return EngineChoice(None)
    if auto.engine != "auto":
        return EngineChoice(auto.engine, CHOSEN_IN_SPEC.format(engine=auto.engine))
    if not served:
        return EngineChoice("hpa", AUTO_HPA_NO_KEDA)
    if not usable:
        return EngineChoice("hpa", AUTO_HPA_KEDA_OFF)
    if denied:
        return EngineChoice("hpa", AUTO_HPA_NO_RBAC.format(verbs=" or ".join(denied)))
    if problems:
        return EngineChoice("hpa", AUTO_HPA_NOT_REVIEWED.format(problems="; ".join(problems)))
    return EngineChoice("keda", AUTO_KEDA)


# --------------------------------------------------------------------------- objects


def _target(tp: TritonPipeline) -> str:
    auto = tp.spec.autoscaling
    assert auto is not None
    value = auto.target
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def hpa(tp: TritonPipeline, settings: Settings, engine: Engine | None = None) -> dict[str, Any] | None:
    """autoscaling/v2 HPA with one Pods metric served by prometheus-adapter (rules in the chart), when the
    pipeline's engine (`engine`: as the operator resolved `auto`, else `engine_of`) is the HPA."""
    auto = tp.spec.autoscaling
    if auto is None or (engine or engine_of(tp)) != "hpa":
        return None
    metric: dict[str, Any] = {"name": METRIC_NAMES[auto.metric]}
    if auto.metric in PER_MODEL:
        metric["selector"] = {
            "matchExpressions": [{"key": "model", "operator": "NotIn", "values": ensembles(tp)}]
        }
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": tp.name},
        "minReplicas": auto.min_replicas,
        "maxReplicas": auto.max_replicas,
        "metrics": [
            {
                "type": "Pods",
                "pods": {"metric": metric, "target": {"type": "AverageValue", "averageValue": _target(tp)}},
            }
        ],
    }
    b = behavior(tp)
    if b:
        spec["behavior"] = b
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(tp.name, tp, settings),
        "spec": spec,
    }


def scaled_object(
    tp: TritonPipeline, settings: Settings, engine: Engine | None = None
) -> dict[str, Any] | None:
    """KEDA ScaledObject with a prometheus trigger on `pipeline_query` (KEDA makes the HPA itself), when
    the pipeline's engine (`engine`, else `engine_of`) is KEDA."""
    auto = tp.spec.autoscaling
    if auto is None or (engine or engine_of(tp)) != "keda":
        return None
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": tp.name},
        "minReplicaCount": auto.min_replicas,
        "maxReplicaCount": auto.max_replicas,
        "triggers": [
            {
                "type": "prometheus",
                "name": METRIC_NAMES[auto.metric].replace("_", "-"),
                "metricType": KEDA_METRIC_TYPE[auto.metric],
                "metadata": {
                    "serverAddress": auto.prometheus_address or settings.prometheus_address,
                    "query": pipeline_query(tp),
                    "threshold": _target(tp),
                },
            }
        ],
    }
    b = behavior(tp)
    if b:
        spec["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": b}}
    return {
        "apiVersion": SCALED_OBJECT_API[0],
        "kind": SCALED_OBJECT_API[1],
        "metadata": metadata(tp.name, tp, settings),
        "spec": spec,
    }


KEDA_HPA_PREFIX = "keda-hpa-"  # KEDA names the HPA it makes for a ScaledObject keda-hpa-<its name>


def hpa_name(tp: TritonPipeline, engine: Engine | None = None) -> str | None:
    """The name of the HPA that scales the pipeline: ours (engine hpa) or KEDA's (engine keda)."""
    if tp.spec.autoscaling is None:
        return None
    return tp.name if (engine or engine_of(tp)) == "hpa" else f"{KEDA_HPA_PREFIX}{tp.name}"


REPLICAS_HANDOVER_MANAGER = "tritonpipeline-replicas-handover"


def _manages_replicas(live: dict[str, Any], manager: str) -> bool:
    """Whether `manager` set the live Deployment's spec.replicas by server-side apply."""
    return any(
        entry.get("manager") == manager
        and entry.get("operation") == "Apply"
        and "f:replicas" in (entry.get("fieldsV1") or {}).get("f:spec", {})
        for entry in live.get("metadata", {}).get("managedFields") or []
    )


def replicas_handover(
    tp: TritonPipeline, deployment: dict[str, Any], live: dict[str, Any] | None, manager: str
) -> dict[str, Any] | None:
    """What keeps the replica count when a pipeline gets an autoscaler, or None when nothing must.

    With autoscaling the operator stops applying spec.replicas (the HPA owns it), and server-side apply
    removes a field its last manager stops setting: the Deployment would drop to 1 pod. Kubernetes' way
    out is to hand the field over first: a second field manager applies the current count (at least
    minReplicas), so it stays when the operator's apply omits it. For a Deployment still to be created
    it starts at minReplicas (applied just after the creation)."""
    auto = tp.spec.autoscaling
    if auto is None or (live is not None and not _manages_replicas(live, manager)):
        return None
    current = live["spec"].get("replicas", 0) if live is not None else 0
    meta = deployment["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": {"replicas": max(int(current), auto.min_replicas)},
    }


def describe(tp: TritonPipeline, engine: Engine | None = None) -> str:
    """One line for status and logs: what scales the pipeline (with `engine`, as the operator resolved
    `auto`), and the exact query behind it."""
    auto = tp.spec.autoscaling
    if auto is None:
        return f"fixed at {tp.spec.server.replicas} replica(s)"
    what = (
        f"HorizontalPodAutoscaler {tp.name} on Pods metric {METRIC_NAMES[auto.metric]} (prometheus-adapter)"
        if (engine or engine_of(tp)) == "hpa"
        else f"KEDA ScaledObject {tp.name} (prometheus trigger, {KEDA_METRIC_TYPE[auto.metric]})"
    )
    return (
        f"{what}, {auto.min_replicas}..{auto.max_replicas} replicas, target {_target(tp)}; "
        f"query: {pipeline_query(tp)}"
    )
