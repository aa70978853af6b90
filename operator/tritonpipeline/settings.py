"""Operator settings, read once at start-up from flags and environment variables.

Each setting is declared once, on its field (`setting(...)`): its variable, how its text is read, its
description and the `tritonpipeline run` flag that overrides it; `read_env` reads every declared one,
and docs/reference/settings.md is generated from the same declarations (tools/reference.py)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, get_args

GROUP = "serving.tritonpipeline.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"  # a TritonPipeline's apiVersion
PLURAL = "tritonpipelines"
KIND = "TritonPipeline"
# the operator's name: its field manager, the value of the managed-by label and the source of its events
OPERATOR_NAME = "tritonpipeline-operator"
FIELD_MANAGER = OPERATOR_NAME
# the Dockerfile's target `assembler`, as the chart names it: the operator's repository with a suffix
ASSEMBLER_SUFFIX = "-assembler"
DEFAULT_ASSEMBLER_IMAGE = f"ghcr.io/tritonpipeline/operator{ASSEMBLER_SUFFIX}:0.1.0"
# kube-prometheus-stack's Prometheus Service when installed in the `monitoring` namespace
DEFAULT_PROMETHEUS_ADDRESS = "http://prometheus-operated.monitoring.svc:9090"
# largest ConfigMap payload before the generated repository is split (the API limit is 1 MiB)
DEFAULT_CONFIGMAP_MAX_BYTES = 900 * 1024
MIN_CONFIGMAP_BYTES, MAX_CONFIGMAP_BYTES = 4096, 1024 * 1024
# the most a pipeline's generated repository may hold: etcd keeps every ConfigMap (2 GiB by default, for
# the whole cluster); about 6 times what the largest benchmark pipeline generates (bench/controlplane's
# large_doc, 250 models: 266 files, 702,244 bytes)
DEFAULT_MAX_GENERATED_BYTES = 4 * 1024 * 1024
DEFAULT_PEERING_LIFETIME_SECONDS = 15
# kopf renews a peering entry 5 to 10 s before it ends: from that to two minutes of waiting after a kill
MIN_PEERING_LIFETIME_SECONDS, MAX_PEERING_LIFETIME_SECONDS = 5, 120
MAX_ROLL_OUTDATED = 1000
# the kinds a pipeline makes that stay inside its namespace and serve only its pods (render/reach.py): made
# for any author; the others (Ingress, routes, gateway policies, KEDA's ScaledObject) reach shared
# infrastructure and are made only for an author who may create them
TRUSTED_KINDS = (
    "ConfigMap",
    "Deployment",
    "Service",
    "Secret",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "NetworkPolicy",
)
DEFAULT_WATCH_TIMEOUT_SECONDS = 270
# liveness fails after a watch stream has not reconnected for the watch timeout plus this long
WATCH_STALE_MARGIN_SECONDS = 60
# liveness fails after a loop (runtime/loops.py) has completed no pass for this many of its periods plus a
# margin, by default longer than the watches' own bound: an API server outage alone restarts no operator
# before the watches' liveness would
LOOP_STALE_PERIODS = 3
DEFAULT_LOOP_STALE_MARGIN_SECONDS = 300
# what a pipeline's routers run on: the spec's server.router and the operator's router setting
RouterMode = Literal["auto", "native", "python"]
ROUTER_MODES: tuple[str, ...] = get_args(RouterMode)
# the address family of the cluster's pod network (its first, on dual-stack clusters)
IpFamily = Literal["IPv4", "IPv6"]
IP_FAMILIES: tuple[str, ...] = get_args(IpFamily)
# whether the pods' user and group ids are left to the platform (OpenShift's SCC): render/security_context.py
SecurityContextAdaptation = Literal["auto", "force", "disabled"]
ADAPTATIONS: tuple[str, ...] = get_args(SecurityContextAdaptation)
ENV_PREFIX = "TRITONPIPELINE_"
SETTING = "setting"  # the key of a field's EnvSetting in its dataclasses metadata
BAD_VALUE = "{env}={text!r}: {why}"  # a variable whose text cannot be read


@dataclass(frozen=True)
class EnvSetting:
    """How one field is read from the environment, and what the settings page says about it."""

    env: str  # the variable
    description: str
    parse: Callable[[str], Any] = str  # its text to the field's value (ValueError: cannot be read)
    flag: str = ""  # the `tritonpipeline run` flag that overrides the variable
    default_text: str = ""  # the default in words, where it is computed rather than the field's default


def setting(
    default: Any,
    env: str,
    description: str,
    parse: Callable[[str], Any] = str,
    *,
    flag: str = "",
    default_text: str = "",
) -> Any:
    """A dataclass field read from `env` (`ENV_PREFIX` + `env`) when that variable is set."""
    declared = EnvSetting(ENV_PREFIX + env, description, parse, flag, default_text)
    return field(default=default, metadata={SETTING: declared})


def declared(cls: type) -> list[tuple[Field[Any], EnvSetting]]:
    """The fields of dataclass `cls` that an environment variable sets, in their order."""
    return [(f, f.metadata[SETTING]) for f in fields(cls) if SETTING in f.metadata]


def env_name(cls: type, name: str) -> str:
    """The variable that sets field `name` of dataclass `cls`."""
    return next(s.env for f, s in declared(cls) if f.name == name)


def read_env(
    cls: type, env: Mapping[str, str], error: Callable[[str], Exception] = ValueError
) -> dict[str, Any]:
    """The values of `cls`'s declared fields whose variables `env` sets (set but empty counts as set);
    a text that cannot be read raises `error` with `BAD_VALUE`."""
    values: dict[str, Any] = {}
    for f, s in declared(cls):
        if s.env in env:
            try:
                values[f.name] = s.parse(env[s.env])
            except ValueError as exc:
                raise error(BAD_VALUE.format(env=s.env, text=env[s.env], why=exc)) from None
    return values


class SettingsError(ValueError):
    """A variable whose text cannot be read (`BAD_VALUE`: it names the variable)."""


@dataclass(frozen=True)
class Range:
    """Reads a finite number from `low` (or above it, `above`) up to `high`, whole when `whole`; `unit`
    names what it counts. Its `text` is what the settings page and the error say, and the chart's
    values.schema.json states the same bounds (a test compares them)."""

    low: float
    high: float | None = None
    above: bool = False
    whole: bool = False
    unit: str = "seconds"

    @property
    def text(self) -> str:
        kind = f"a {'whole ' if self.whole else ''}number of {self.unit}"
        low = f"{self.low:.15g}"  # 4096 and 30, not 4096.0, 30.0 or 4.096e+03
        if self.high is not None:
            return f"{kind} from {low} to {self.high:.15g}"
        return f"{kind} above {low}" if self.above else f"{kind}, at least {low}"

    def __call__(self, text: str) -> float:
        try:
            value = int(text) if self.whole else float(text)
        except ValueError:
            raise ValueError(f"expected {self.text}") from None
        if not math.isfinite(value) or value < self.low or (self.above and value == self.low):
            raise ValueError(f"expected {self.text}")
        if self.high is not None and value > self.high:
            raise ValueError(f"expected {self.text}")
        return value


def _names(text: str) -> tuple[str, ...]:
    """Comma-separated names, empty ones left out (cli/cmd_run.py checks each is a namespace's name)."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _items(text: str) -> tuple[str, ...]:
    """Comma-separated items, each stripped, empty ones left out."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _router_mode(text: str) -> str:
    """`auto`, `native` or `python`."""
    if text not in ROUTER_MODES:
        raise ValueError(f"expected one of {', '.join(ROUTER_MODES)}")
    return text


def _ip_family(text: str) -> str:
    """`IPv4` or `IPv6`."""
    if text not in IP_FAMILIES:
        raise ValueError(f"expected one of {', '.join(IP_FAMILIES)}")
    return text


def _adaptation(text: str) -> str:
    """`auto`, `force` or `disabled`."""
    if text not in ADAPTATIONS:
        raise ValueError(f"expected one of {', '.join(ADAPTATIONS)}")
    return text


def _labels(text: str) -> tuple[tuple[str, str], ...]:
    """Comma-separated `key=value` pairs (an item without `=` is ignored)."""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return tuple(sorted((k.strip(), v.strip()) for k, v in pairs))


def _flag(text: str) -> bool:
    """`1`, `true` or `yes` (any case) turn it on; anything else leaves it off."""
    return text.lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Settings:
    """What the operator needs besides the CRs themselves."""

    assembler_image: str = setting(
        DEFAULT_ASSEMBLER_IMAGE,
        "ASSEMBLER_IMAGE",
        "Image of the init container that assembles each Triton pod's model repository "
        "(`tritonpipeline assemble`): normally the assembler image, the Dockerfile's target `assembler`.",
    )
    namespaces: tuple[str, ...] = setting(
        (),
        "NAMESPACES",
        "Namespaces whose TritonPipelines the operator watches; empty: every namespace.",
        _names,
        flag="--namespace",
    )
    resync_seconds: float = setting(
        60.0,
        "RESYNC_SECONDS",
        "Seconds between drift repairs: every pipeline's children are re-applied this often.",
        Range(0, above=True),
    )
    configmap_max_bytes: int = setting(
        DEFAULT_CONFIGMAP_MAX_BYTES,
        "CONFIGMAP_MAX_BYTES",
        "Largest ConfigMap payload in bytes before the generated repository is split over several "
        "ConfigMaps (the API limit is 1 MiB).",
        Range(MIN_CONFIGMAP_BYTES, MAX_CONFIGMAP_BYTES, whole=True, unit="bytes"),
    )
    max_generated_bytes: int = setting(
        DEFAULT_MAX_GENERATED_BYTES,
        "MAX_GENERATED_BYTES",
        "The most bytes a pipeline's generated repository may hold, all its ConfigMaps together (etcd keeps "
        "them all: 2 GiB by default for the whole cluster); a pipeline that would generate more is refused.",
        Range(MIN_CONFIGMAP_BYTES, whole=True, unit="bytes"),
    )
    compile_workers: int = setting(
        0,
        "COMPILE_WORKERS",
        "Worker processes that parse, compile and check pipelines (the webhook's reviews and the "
        "reconciles), away from the operator's event loop (the chart's default: 2); 0: threads of the "
        "operator's own process.",
        Range(0, 16, whole=True, unit="processes"),
    )
    compiles_per_namespace: int = setting(
        1,
        "COMPILES_PER_NAMESPACE",
        "The most compile workers one namespace's pipelines hold at once: the others are left to other "
        "namespaces (a tenant's storm of large specs waits for its own turns).",
        Range(1, 16, whole=True, unit="processes"),
    )
    compile_timeout_seconds: float = setting(
        8.0,
        "COMPILE_TIMEOUT_SECONDS",
        "Longest compile of one pipeline: one that takes longer is ended with its worker and the "
        "pipeline refused (below the webhook's timeout, so the refusal reaches the author).",
        Range(1, 300),
    )
    field_manager: str = FIELD_MANAGER
    prometheus_address: str = setting(
        DEFAULT_PROMETHEUS_ADDRESS,
        "PROMETHEUS_ADDRESS",
        "The Prometheus that KEDA ScaledObjects query, unless a pipeline sets "
        "`autoscaling.prometheusAddress`.",
    )
    use_keda: bool = setting(
        True,
        "USE_KEDA",
        "Whether the operator scales pipelines with KEDA where the cluster serves KEDA's ScaledObject: "
        "`autoscaling.engine: auto` (the default) then makes a ScaledObject, and the HPA on "
        "prometheus-adapter's metrics where KEDA is not served; off (`false`): `auto` always makes the HPA, "
        "and a pipeline that asks for `keda` gets none. The chart sets it with the ScaledObject permissions "
        "it grants (its `autoscaling.keda`).",
        _flag,
    )
    discovery_seconds: float = setting(
        10.0,
        "DISCOVERY_SECONDS",
        "How long the operator keeps what API discovery said about an optional API (KEDA's ScaledObject, a "
        "routing provider's kinds) before it asks again: each period it asks about those its pipelines "
        "use, and when an answer changes (a CRD installed or removed) it re-applies those pipelines at once "
        "(an autoscaling engine `auto` switches to KEDA).",
        Range(0, above=True),
    )
    # the names of Secrets, not secrets: named so that linters' secret-in-env checks do not take it for one
    assembler_pull_secrets: tuple[str, ...] = setting(
        (),
        "ASSEMBLER_IMAGE_PULL_REFS",
        "Names of the pull secrets of the assembler image (the chart's assemblerImagePullSecrets), added "
        "to every Triton pod: each must exist in every pipeline's namespace.",
        _items,
    )
    watch_timeout_seconds: int = setting(
        DEFAULT_WATCH_TIMEOUT_SECONDS,
        "WATCH_TIMEOUT_SECONDS",
        "Longest watch request: the API server ends it then and kopf reopens it.",
        Range(1, whole=True),
    )
    watch_stale_seconds: float = setting(
        float(DEFAULT_WATCH_TIMEOUT_SECONDS + WATCH_STALE_MARGIN_SECONDS),
        "WATCH_STALE_SECONDS",
        "Liveness (/healthz) and readiness (/readyz) fail when a watch stream has not (re)connected "
        "for this many seconds.",
        Range(0, above=True),
        default_text=f"`TRITONPIPELINE_WATCH_TIMEOUT_SECONDS` + {WATCH_STALE_MARGIN_SECONDS}",
    )
    loop_stale_margin_seconds: float = setting(
        float(DEFAULT_LOOP_STALE_MARGIN_SECONDS),
        "LOOP_STALE_MARGIN_SECONDS",
        f"Liveness (/healthz) and readiness (/readyz) fail when one of the operator's loops has not "
        f"completed a pass for {LOOP_STALE_PERIODS} of its periods plus this many seconds: the drift repair "
        "(`TRITONPIPELINE_RESYNC_SECONDS`), the status poll (`TRITONPIPELINE_STATUS_POLL_SECONDS`), the "
        "leadership check (with peering) and the webhook certificate's check (docs/how-to/operate.md, "
        "Health). A standby replica makes no drift repair or status poll, and is not judged on them.",
        Range(0, above=True),
    )
    metrics_url: str = setting(
        "",
        "METRICS_URL",
        "Serve Prometheus /metrics and /readyz here (`http://HOST:PORT`); empty: not served.",
        flag="--metrics",
    )
    status_poll_seconds: float = setting(
        30.0,
        "STATUS_POLL_SECONDS",
        "Seconds between reads of each pipeline's pod metrics (port 8002) and autoscaler into its status "
        "(status.steps, status.bottleneck, status.autoscaler); 0: never.",
        Range(0),
    )
    operator_namespace: str = setting(
        "",
        "OPERATOR_NAMESPACE",
        "The operator's own namespace (the chart sets it): a pipeline's NetworkPolicy lets the operator's "
        "pods read metrics on port 8002 for the status poll; empty: no such rule.",
    )
    operator_labels: tuple[tuple[str, str], ...] = setting(
        (),
        "OPERATOR_LABELS",
        "The operator pods' labels (the chart sets them), which that NetworkPolicy rule selects.",
        _labels,
    )
    # the cluster admin's grants to whoever may create TritonPipelines (render/checks.py, privilege_problems)
    allow_privileged: bool = setting(
        False,
        "ALLOW_PRIVILEGED",
        'Let pipelines ask for securityContexts beyond Pod Security "restricted" (privileged, added '
        "capabilities, root...) in every namespace; off: refused with the field path.",
        _flag,
    )
    shared_gateway_namespaces: tuple[str, ...] = setting(
        (),
        "SHARED_GATEWAY_NAMESPACES",
        "Namespaces whose Gateways the operator reads for a pipeline of any namespace (to tell which "
        "implementation serves a Gateway its routes attach to); a Gateway elsewhere than the pipeline's "
        "own namespace and these is not read, and the pipeline names its implementation.",
        _items,
    )
    refused_namespaces: tuple[str, ...] = setting(
        ("kube-system", "kube-public", "kube-node-lease"),
        "REFUSED_NAMESPACES",
        "Namespaces no pipeline may be in (the cluster's own: whoever may create a TritonPipeline there "
        "would get pods beside the control plane's, with its Secrets and service accounts at hand).",
        _items,
    )
    default_network_policy: bool = setting(
        False,
        "DEFAULT_NETWORK_POLICY",
        "Give a pipeline without spec.networkPolicy a NetworkPolicy all the same: its inference ports "
        "admit the pods of its namespace and of `TRITONPIPELINE_ROUTING_NAMESPACES`, its metrics port those "
        "of its namespace, of `TRITONPIPELINE_METRICS_NAMESPACES` and the operator's; nobody else. The chart "
        "turns it on.",
        _flag,
    )
    routing_namespaces: tuple[str, ...] = setting(
        (),
        "ROUTING_NAMESPACES",
        "Namespaces whose pods may reach every pipeline's inference ports where a NetworkPolicy leaves "
        "`inference` out: the routing tier's (the ingress controller's, the Gateway's).",
        _items,
    )
    metrics_namespaces: tuple[str, ...] = setting(
        (),
        "METRICS_NAMESPACES",
        "Namespaces whose pods may read every pipeline's metrics port where a NetworkPolicy leaves "
        "`metrics` out: Prometheus's.",
        _items,
    )
    review_authors: bool = setting(
        False,
        "REVIEW_AUTHORS",
        "Ask, for each kind a pipeline makes and each object, host, ingress class or metrics address it "
        "names, whether its author may do that themselves (a SubjectAccessReview at admission, recorded "
        "on the pipeline: render/reach.py) unless a list below allows it; refuse the pipeline otherwise. "
        "Needs the admission webhook (without it nothing can be reviewed, so only what the lists allow "
        "is made). The chart turns it on.",
        _flag,
    )
    review_key_store: str = setting(
        "",
        "REVIEW_KEY_STORE",
        "`NAMESPACE/NAME` of the Secret holding the key that signs the review records (filled by the "
        "first replica that finds it empty); empty: a key of this process's own, so records written "
        "before a restart must be made again (a spec change or any annotation by the author).",
    )
    trusted_kinds: tuple[str, ...] = setting(
        TRUSTED_KINDS,
        "TRUSTED_KINDS",
        "Kinds the operator makes for any pipeline without asking whether its author may create them: "
        "those that stay inside the pipeline's namespace and serve only its pods.",
        _items,
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        "ALLOWED_HOSTS",
        "Hosts an Ingress or route may take for a pipeline whose author may not create one: `PATTERN` (any "
        "namespace) or `NAMESPACE/PATTERN`, shell-style (`*.team-a.example.com`).",
        _items,
    )
    allowed_ingress_classes: tuple[str, ...] = setting(
        (),
        "ALLOWED_INGRESS_CLASSES",
        "Ingress classes likewise (`NAME` or `NAMESPACE/NAME`, shell-style).",
        _items,
    )
    allowed_metrics_addresses: tuple[str, ...] = setting(
        (),
        "ALLOWED_METRICS_ADDRESSES",
        "Prometheus addresses (spec.autoscaling.prometheusAddress) a KEDA trigger may read likewise "
        "(`URL-PATTERN` or `NAMESPACE/URL-PATTERN`, shell-style).",
        _items,
    )
    allowed_trace_collectors: tuple[str, ...] = setting(
        (),
        "ALLOWED_TRACE_COLLECTORS",
        "OpenTelemetry collector URLs (spec.server.tracing.url, or an `opentelemetry,url=` in "
        "spec.server.args) the Triton pods may send spans to for a pipeline whose author may not create "
        "Deployments in its namespace (`URL-PATTERN` or `NAMESPACE/URL-PATTERN`, shell-style).",
        _items,
    )
    privileged_namespaces: tuple[str, ...] = setting(
        (),
        "PRIVILEGED_NAMESPACES",
        "The same grant in these namespaces only.",
        _items,
    )
    allowed_service_accounts: tuple[str, ...] = setting(
        (),
        "ALLOWED_SERVICE_ACCOUNTS",
        "Service accounts Triton pods may run as besides the namespace's default: `NAME` (any "
        "namespace), `NAMESPACE/NAME` or `*` (any).",
        _items,
    )
    allowed_image_registries: tuple[str, ...] = setting(
        (),
        "ALLOWED_IMAGE_REGISTRIES",
        "Registries `spec.server.image` may come from (a host, with its port if it has one); empty: any.",
        _items,
    )
    roll_outdated: int = setting(
        0,
        "ROLL_OUTDATED",
        "Pipelines whose pods run an earlier operator's rendering (render/pinning.py) are rolled to this "
        "one's this many at a time, each until its rollout completes; 0: none (each waits for its spec to "
        "change or for its roll annotation).",
        Range(0, MAX_ROLL_OUTDATED, whole=True, unit="pipelines"),
    )
    peering: str = setting(
        "",
        "PEERING",
        "Name of kopf's peering object the replicas share: the oldest live replica reconciles, every "
        "replica serves the webhook (render/peering.py); empty: this process runs alone.",
    )
    router: RouterMode = setting(  # noqa: RUF009  (a Literal alias: immutable, as every setting's value)
        "auto",
        "ROUTER",
        "What the routers of pipelines whose spec.server.router is `auto` run on: `native` or `python` for "
        "all of them; `auto`: native where the pipeline's Triton image is known to run it "
        "(compiler/router_choice.py). The operator's image carries the native router for its architecture.",
        _router_mode,
    )
    ip_family: IpFamily = setting(  # noqa: RUF009  (a Literal alias, as router)
        "IPv4",
        "IP_FAMILY",
        "The address family of the cluster's pod network (the first one on a dual-stack cluster): with "
        "`IPv6` the Triton pods' HTTP and metrics endpoints listen on IPv6 (tritonserver takes one family "
        "per endpoint: triton/addresses.py) and their probes ask `[::1]`.",
        _ip_family,
    )
    adapt_security_context: SecurityContextAdaptation = setting(  # noqa: RUF009  (a Literal alias, as router)
        "auto",
        "ADAPT_SECURITY_CONTEXT",
        "Leave `runAsUser`, `runAsGroup` and `fsGroup` out of the Triton pods' defaults, so the platform "
        "assigns them (OpenShift's `restricted-v2` SCC refuses ids outside the namespace's range, 1000 "
        "included): `force`; `disabled`: keep the defaults (uid, gid and fsGroup 1000); `auto`: `force` on "
        "a cluster that serves OpenShift's SecurityContextConstraints, asked once at start-up (`validate` "
        "and `manifests` ask no cluster: there `auto` keeps the defaults). A spec's own ids are kept.",
        _adaptation,
    )
    peering_lifetime_seconds: int = setting(
        DEFAULT_PEERING_LIFETIME_SECONDS,
        "PEERING_LIFETIME_SECONDS",
        "Seconds a replica's peering entry lives without a keep-alive: how long a killed active replica "
        "keeps the standby waiting.",
        Range(MIN_PEERING_LIFETIME_SECONDS, MAX_PEERING_LIFETIME_SECONDS, whole=True),
    )

    @property
    def platform_ids(self) -> bool:
        """The platform assigns the Triton pods' user and group ids (`auto` resolved by the operator)."""
        return self.adapt_security_context == "force"

    @classmethod
    def from_env(cls, namespaces: tuple[str, ...] = (), metrics_url: str | None = None) -> Settings:
        """The settings in the environment; `namespaces` and `metrics_url` (flags) override theirs."""
        values = read_env(cls, os.environ, SettingsError)
        if "watch_stale_seconds" not in values:  # its default follows the watch timeout
            watch = values.get("watch_timeout_seconds", DEFAULT_WATCH_TIMEOUT_SECONDS)
            values["watch_stale_seconds"] = float(watch + WATCH_STALE_MARGIN_SECONDS)
        if namespaces:  # -n a -n b, or -n a,b as the variable takes them
            values["namespaces"] = _names(",".join(namespaces))
        if metrics_url is not None:
            values["metrics_url"] = metrics_url
        return cls(**values)
