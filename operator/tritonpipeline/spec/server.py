"""spec.server and spec.modelRepository: the Triton pods and where the model files come from."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from ..settings import RouterMode
from ..triton import tritonserver_options
from . import kubernetes
from .base import (
    DEFAULT_IMAGE,
    DNS_SUBDOMAIN_RE,
    INT32_MAX,
    NVIDIA_GPU,
    REGION_RE,
    RESOURCE_RE,
    RULE_TEXT,
    SECRET_KEY_RE,
    URI_SCHEMES,
    URL_RE,
    FieldProblems,
    Quantity,
    Rule,
    _Base,
    _name_rule,
)


class SecretRef(_Base):
    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(
        description="Name of a Secret in the pipeline's namespace."
    )


class AdminKeyRef(_Base):
    """A Secret (in the pipeline's namespace) holding the key of Triton's administrative APIs."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(
        description="The Secret's name (in the pipeline's namespace)."
    )
    key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = Field(
        default="admin-key", description="Its data key holding the key."
    )


class KeyRef(_Base):
    """One key of a Secret or ConfigMap in the pipeline's namespace."""

    name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] = Field(
        description="The Secret's or ConfigMap's name (in the pipeline's namespace)."
    )
    key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = Field(
        default="ca.crt", description="Its data key holding the PEM CA bundle."
    )


class S3Options(_Base):
    """How the init container reaches an S3 or S3-compatible store (MinIO, Ceph RGW, ...)."""

    endpoint: Annotated[str, _name_rule(URL_RE, "url")] | None = Field(
        default=None, description="URL of an S3-compatible store (`https://minio.storage:9000`); absent: AWS."
    )
    region: Annotated[str, _name_rule(REGION_RE, "region")] | None = Field(
        default=None, description="The bucket's region (`us-east-1`)."
    )
    addressing_style: Literal["auto", "path", "virtual"] | None = Field(
        default=None,
        description="Bucket in the path or in the host name; absent: path-style with an endpoint (in-cluster "
        "host names take no bucket prefix), else boto3's choice.",
    )
    ca_secret_ref: KeyRef | None = Field(
        default=None,
        description="A Secret key holding the PEM CA bundle that signed the endpoint's certificate.",
    )
    ca_config_map_ref: KeyRef | None = Field(
        default=None, description="The same CA bundle from a ConfigMap key (give one of the two)."
    )

    RULES = (
        Rule(
            lambda o: o.ca_secret_ref is None or o.ca_config_map_ref is None,
            "!(has(self.caSecretRef) && has(self.caConfigMapRef))",
            "give the CA bundle once: caSecretRef or caConfigMapRef, not both",
            ".caConfigMapRef",
        ),
        Rule(
            lambda o: (
                (o.ca_secret_ref is None and o.ca_config_map_ref is None)
                or not (o.endpoint or "").startswith("http://")
            ),
            "!((has(self.caSecretRef) || has(self.caConfigMapRef)) && has(self.endpoint)"
            " && self.endpoint.startsWith('http://'))",
            "a CA bundle needs an https:// endpoint",
            ".endpoint",
        ),
    )


class GcsOptions(_Base):
    """gs:// credentials: the key of modelRepository.secretRef holding a service-account JSON key, mounted
    as a file for GOOGLE_APPLICATION_CREDENTIALS. Without secretRef the pod's identity is used
    (Workload Identity through spec.server.serviceAccountName)."""

    credentials_key: Annotated[str, _name_rule(SECRET_KEY_RE, "secret key")] = Field(
        default="key.json",
        description="The key of modelRepository.secretRef holding the service-account key.",
    )


class ModelRepository(_Base):
    uri: Annotated[str, Field(min_length=1, max_length=1024)] = Field(
        description="`pvc://CLAIM/PATH`, `s3://BUCKET/PATH`, `gs://BUCKET/PATH`; a local path (relative to "
        "the file) for the CLI only."
    )
    secret_ref: SecretRef | None = Field(
        default=None,
        description="Cloud credentials for the init container: for s3:// a Secret whose keys become its "
        "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); for gs:// a Secret "
        "holding a service-account JSON key, mounted as a file (GOOGLE_APPLICATION_CREDENTIALS). Unset: the "
        "pod's identity (IRSA, Workload Identity through server.serviceAccountName).",
    )
    s3: S3Options | None = Field(
        default=None, description="s3:// only: endpoint, region, addressing style and CA bundle of the store."
    )
    gcs: GcsOptions | None = Field(
        default=None, description="gs:// only: which key of secretRef holds the key."
    )

    @field_validator("uri")
    @classmethod
    def _check_uri(cls, uri: str) -> str:
        if "://" in uri:
            scheme, _, rest = uri.partition("://")
            if scheme not in URI_SCHEMES:
                raise ValueError(
                    f"unsupported scheme {scheme!r} in {uri!r}: expected pvc://, s3://, gs:// or a local path"
                )
            head = rest.split("/", 1)[0]
            if not head:
                what = "claim" if scheme == "pvc" else "bucket"
                raise ValueError(f"{uri!r} has no {what} name: expected {scheme}://{what.upper()}/PATH")
            if scheme == "pvc" and not DNS_SUBDOMAIN_RE.fullmatch(head):
                raise ValueError(f"invalid claim name {head!r} in {uri!r}: {RULE_TEXT['object name']}")
        if any(c in uri for c in "\n\r\0"):
            raise ValueError("the uri contains control characters")
        return uri

    RULES = (
        Rule(
            lambda r: r.s3 is None or r.uri.startswith("s3://"),
            "!has(self.s3) || self.uri.startsWith('s3://')",
            "applies to s3:// sources only",
            ".s3",
        ),
        Rule(
            lambda r: r.gcs is None or r.uri.startswith("gs://"),
            "!has(self.gcs) || self.uri.startsWith('gs://')",
            "applies to gs:// sources only",
            ".gcs",
        ),
    )

    @property
    def scheme(self) -> str:
        return self.uri.partition("://")[0] if "://" in self.uri else "local"


TRACE_FLAG_SET = "cannot be given in server.args with server.tracing, which sets the trace configuration"

# how a roll or a drain replaces a pipeline's pods (spec.server.rollout; render/disruption.py)
Rollout = Literal["Surge", "ReplaceInPlace"]

# Triton's request tracing (--trace-config: compiler/tracing.py renders it)
TraceMode = Literal["opentelemetry", "triton"]
TraceLevel = Literal["TIMESTAMPS", "TENSORS", "OFF"]
# an OpenTelemetry resource attribute's key (service.name, deployment.environment, k8s.cluster.name)
TRACE_RESOURCE_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,127}$")
MAX_TRACE_RESOURCES = 32
MAX_TRACE_VALUE = 256


class Tracing(_Base):
    """Triton's tracing of inference requests, as tritonserver's `--trace-config` flags, in the cluster's
    pods and under `tritonpipeline serve`."""

    mode: TraceMode = Field(
        default="opentelemetry",
        description="`opentelemetry`: spans exported over OTLP/HTTP to `url`; `triton`: Triton's own JSON "
        "trace file (in the pod `/tp/traces/trace.json` on an emptyDir, `kubectl cp` it out; under `serve` "
        "the file `--trace-file` names).",
    )
    level: Annotated[list[TraceLevel], Field(min_length=1, max_length=2)] = Field(
        default=["TIMESTAMPS"],
        description="What each trace records: `TIMESTAMPS` (when a request was received, queued, computed, "
        "answered), `TENSORS` (its input and output tensors; mode `triton` only), or `OFF` (configured but "
        "not tracing until the trace API turns it on, mode `triton`).",
    )
    rate: Annotated[int, Field(ge=1, le=INT32_MAX)] = Field(
        default=1000, description="Trace every `rate`-th request (1: every request)."
    )
    count: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = Field(
        default=None, description="Stop after this many traces; absent: never stop."
    )
    log_frequency: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = Field(
        default=None,
        description="Mode `triton`: write the traces every this many traces, each batch to a file of its "
        "own (`trace.json.0`, `trace.json.1`, ...); `0` or absent: all of them to `trace.json` when "
        "tritonserver stops.",
    )
    url: Annotated[str, _name_rule(URL_RE, "url")] | None = Field(
        default=None,
        description="Mode `opentelemetry`: the OTLP/HTTP endpoint spans are sent to, such as "
        "`http://otel-collector.observability:4318/v1/traces`; absent: Triton's "
        "`http://localhost:4318/v1/traces` (a collector beside it). A URL the author chooses is used only "
        "where an admin allows it or the author may create Deployments in the namespace "
        "(docs/concepts/security.md).",
    )
    resource: dict[str, str] = Field(
        default={},
        description="Mode `opentelemetry`: resource attributes of the spans (`deployment.environment: "
        "prod`); `service.name` is the pipeline's name unless given here.",
    )

    RULES = (
        Rule(
            lambda t: t.url is None or t.mode == "opentelemetry",
            "!has(self.url) || self.mode == 'opentelemetry'",
            "applies to mode opentelemetry only",
            ".url",
        ),
        Rule(
            lambda t: not t.resource or t.mode == "opentelemetry",
            "!has(self.resource) || size(self.resource) == 0 || self.mode == 'opentelemetry'",
            "applies to mode opentelemetry only",
            ".resource",
        ),
        Rule(
            lambda t: t.log_frequency is None or t.mode == "triton",
            "!has(self.logFrequency) || self.mode == 'triton'",
            "applies to mode triton only (the trace file)",
            ".logFrequency",
        ),
        Rule(
            lambda t: t.mode == "triton" or all(level == "TIMESTAMPS" for level in t.level),
            "self.mode == 'triton' || !has(self.level) || self.level.all(l, l == 'TIMESTAMPS')",
            "mode opentelemetry traces TIMESTAMPS only (Triton exports no TENSORS spans, and OFF would make "
            "a tracer that never traces: leave tracing out)",
            ".level",
        ),
        Rule(
            lambda t: len(t.level) == len(set(t.level)) and ("OFF" not in t.level or len(t.level) == 1),
            "!has(self.level) || self.level.size() == 1 || "
            "(self.level[0] != self.level[1] && !('OFF' in self.level))",
            "each level once, and OFF alone",
            ".level",
        ),
    )

    @field_validator("resource")
    @classmethod
    def _attributes(cls, value: dict[str, str]) -> dict[str, str]:
        found = [
            (f".{key}", f"invalid resource attribute key {key!r}: letters, digits, '_', '.', '-' or '/', "
             "at most 128")
            for key in value
            if not TRACE_RESOURCE_KEY_RE.fullmatch(key)
        ]  # fmt: skip
        found += [
            (f".{key}", f"a resource attribute value of at most {MAX_TRACE_VALUE} characters without "
             "control characters")
            for key, text in value.items()
            if len(text) > MAX_TRACE_VALUE or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)
        ]  # fmt: skip
        if len(value) > MAX_TRACE_RESOURCES:
            found.append(("", f"at most {MAX_TRACE_RESOURCES} resource attributes"))
        if found:
            raise FieldProblems(found)
        return value


class Server(_Base):
    image: Annotated[str, Field(min_length=1)] = Field(
        default=DEFAULT_IMAGE,
        description="tritonserver image of the pods, `[REGISTRY[:PORT]/]NAME[:TAG][@DIGEST]` as the "
        "container runtimes parse it (refused otherwise, instead of the kubelet's InvalidImageName); "
        "`validate` warns for a Triton release older than the known security fixes (see "
        "docs/concepts/security.md).",
    )
    replicas: Annotated[int, Field(ge=0, le=1000)] = Field(
        default=1, description="Pods; ignored when `autoscaling` is set (the HPA owns replicas)."
    )
    gpus: Annotated[int, Field(ge=0, le=64)] = Field(
        default=1, description="GPUs per pod; `0` = CPU only (GPU instance groups become CPU ones)."
    )
    gpu_resource: Annotated[str, _name_rule(RESOURCE_RE, "resource name")] = Field(
        default=NVIDIA_GPU,
        description="Extended resource to request, e.g. a MIG profile `nvidia.com/mig-1g.10gb` (then `gpus` "
        "must be 1, since one process uses one MIG device, and `autoscaling.metric` cannot be "
        "`gpuUtilization`: Triton reads no GPU metrics from MIG devices).",
    )
    resources: Annotated[dict[str, Any], kubernetes.KubernetesType("ResourceRequirements")] = Field(
        default={},
        description="CPU/memory `requests`/`limits` of the Triton container, passed through; a request of "
        "`cpu: 1`, `memory: 2Gi` and `ephemeral-storage: 2Gi` is added for each that sets neither a request "
        "nor a limit (so pods are not BestEffort), and a `memory: 16Gi` limit when memory is not set at all "
        "(so one pipeline cannot take a node's memory).",
    )
    shm_size_limit: Quantity = Field(
        default="2Gi", description="Size limit of the pod's `/dev/shm` (memory; Python-backend tensors)."
    )
    models_size_limit: Quantity = Field(
        default="50Gi", description="Size limit of the volume the init container copies the models into."
    )
    node_selector: dict[str, str] = Field(default={}, description="Passed through to the pod.")
    tolerations: list[Annotated[dict[str, Any], kubernetes.KubernetesType("Toleration")]] = Field(
        default=[],
        description="Passed through; the `nvidia.com/gpu` NoSchedule toleration is added when `gpus > 0`.",
    )
    affinity: Annotated[dict[str, Any], kubernetes.KubernetesType("Affinity")] = Field(
        default={},
        description="Passed through to the pod. Absent: a preferred `podAntiAffinity` on "
        "`kubernetes.io/hostname` spreads the replicas over nodes.",
    )
    args: list[str] = Field(
        default=[],
        description="Extra `tritonserver` flags, read as tritonserver reads them: refused where it would "
        "refuse to start (an unknown or ambiguous option, a value it does not take, flags it refuses "
        "together) or where they set what the operator sets. Passed as written: the pod's args carry each "
        "`$` doubled, so the kubelet expands no `$(VAR)` (the admin key's `$(TRITON_ADMIN_KEY)` stays those "
        "letters).",
    )
    # merged field by field over the operator's restricted-compliant defaults (render/manifests.py)
    security_context: Annotated[dict[str, Any], kubernetes.KubernetesType("SecurityContext")] | None = Field(
        default=None,
        description="Security context of the Triton and init containers. Default (restricted-compliant): "
        "`allowPrivilegeEscalation: false`, `capabilities.drop: [ALL]`, and for the init container "
        "`readOnlyRootFilesystem: true`; a mapping is merged over it field by field. More than Pod Security "
        "`restricted` allows is refused unless the cluster admin allows it.",
    )
    pod_security_context: (
        Annotated[dict[str, Any], kubernetes.KubernetesType("PodSecurityContext")] | None
    ) = Field(
        default=None,
        description="Pod security context. Default: `runAsNonRoot`, uid/gid/fsGroup 1000 (NVIDIA's "
        "`triton-server` user; on OpenShift no ids, which its SCC assigns: the operator setting "
        "`TRITONPIPELINE_ADAPT_SECURITY_CONTEXT`), `seccompProfile: RuntimeDefault`, so pods run in "
        "namespaces enforcing Pod Security `restricted`; a mapping is merged over it field by field.",
    )
    service_account_name: Annotated[str, _name_rule(DNS_SUBDOMAIN_RE, "object name")] | None = Field(
        default=None,
        description="ServiceAccount of the Triton pods (IRSA, Workload Identity); default: the namespace's "
        "`default`.",
    )
    image_pull_secrets: list[SecretRef] = Field(
        default=[],
        description="`[{name: SECRET}]` for the Triton image; the chart's `assemblerImagePullSecrets` (the "
        "init container's image) are added.",
    )
    init_resources: Annotated[dict[str, Any], kubernetes.KubernetesType("ResourceRequirements")] = Field(
        default={},
        description="`requests`/`limits` of the init container. Default: requests `cpu: 100m`, `memory: "
        "128Mi`, `ephemeral-storage: 256Mi`, limit `memory: 1Gi`.",
    )
    startup_timeout_seconds: Annotated[int, Field(ge=10, le=86400)] = Field(
        default=600,
        description="How long Triton may take to load its models before the startup probe restarts it (large "
        "models load for minutes).",
    )
    # how pods are replaced (render/disruption.py); None: Surge, and no default in the CRD, so that a stored
    # pipeline carries no field an operator of an earlier release does not know
    rollout: Rollout | None = Field(
        default=None,
        description="How pods are replaced on a roll (a spec change, an operator upgrade's roll) and on a "
        "node drain. `Surge` (the default): a new pod first, an old one only once a new one is Ready, so "
        "a serving pipeline never goes to zero; it costs one extra pod (a GPU) during the roll, and where "
        "the cluster has no room for it the roll waits (`Progressing=False`, `NoRoomForNewPod`). With "
        "GPUs, from four replicas up a quarter of the pods are also replaced in place (one pod fewer for a "
        "moment, no more extra GPUs). A drain never evicts the only ready replica: the operator replaces "
        "it on another node first. `ReplaceInPlace`: an old pod goes first (`maxSurge: 0`, "
        "`maxUnavailable: 1`, and the PodDisruptionBudget lets a drain evict any one pod): no extra GPU, "
        "but with one replica nothing serves while the new pod loads its models. See "
        "docs/concepts/operator.md#rollouts-and-drains.",
    )
    # the Deployment's strategy, passed through; None: the one `rollout` names (render/disruption.py)
    strategy: Annotated[dict[str, Any], kubernetes.KubernetesType("DeploymentStrategy")] | None = Field(
        default=None,
        description="The Deployment's `strategy`, passed through (instead of `rollout`, for finer control). "
        "The PodDisruptionBudget and the drain follow it: a strategy that surges at one replica (a "
        "`RollingUpdate` with `maxSurge` above 0) is treated as `Surge`, any other as `ReplaceInPlace`.",
    )
    router: RouterMode = Field(
        default="auto",
        description="What the routers inserted for fan-out run on. `native`: a small Triton backend in C "
        "that copies each input to its outputs on the device it lives on (the operator image carries it; the "
        "init container puts it beside each router). `python`: the same router on Triton's Python "
        "backend. `auto`: the operator's setting (`operator.router` in the chart) when that names one, "
        "else native for a Triton image the native router is known to run on (NVIDIA's "
        "`tritonserver:YY.MM` from 24.10) and Python otherwise; `status.graph.routerBackend` says which "
        "was chosen and why.",
    )
    admin_key_secret_ref: AdminKeyRef | None = Field(
        default=None,
        description="A Secret of yours holding the admin-API key; absent: the operator creates "
        "`<name>-admin-key` with a random key (see docs/concepts/security.md).",
    )
    tracing: Tracing | None = Field(
        default=None,
        description="Triton's request tracing (`--trace-config`): OpenTelemetry spans to a collector, or "
        "Triton's own trace file; absent: no tracing. Trace flags in `args` are then refused.",
    )

    RULES = (
        Rule(
            lambda s: s.rollout is None or s.strategy is None,
            "!(has(self.rollout) && has(self.strategy))",
            "set one of rollout and strategy: strategy is the whole Deployment strategy, rollout names one",
            ".rollout",
        ),
    )

    @model_validator(mode="after")
    def _trace_flags(self) -> Server:
        """With `tracing`, no trace flag in `args` (one would change what tracing renders)."""
        if self.tracing is None:
            return self
        flags, _ = tritonserver_options.parse(self.args)
        found = [
            (f".args[{f.index}]", f"--{f.option} {TRACE_FLAG_SET}")
            for f in flags
            if f.option in tritonserver_options.TRACE_OPTIONS
        ]
        if found:
            raise FieldProblems(found)
        return self

    @field_validator("args")
    @classmethod
    def _flags(cls, args: list[str]) -> list[str]:
        found = tritonserver_options.problems(args)
        if found:
            raise FieldProblems([(f"[{p.index}]", p.message) for p in found])
        return args

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, selector: dict[str, str]) -> dict[str, str]:
        return kubernetes.passed_through(selector, kubernetes.labels)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return kubernetes.passed_through(value, kubernetes.image)

    @field_validator("resources", "init_resources")
    @classmethod
    def _resources(cls, value: dict[str, Any]) -> dict[str, Any]:
        return kubernetes.passed_through(value, kubernetes.resources)

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return value if value is None else kubernetes.passed_through(value, kubernetes.strategy)

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, value: dict[str, Any]) -> dict[str, Any]:
        return kubernetes.passed_through(value, kubernetes.affinity)

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return kubernetes.passed_through(value, kubernetes.tolerations)

    @field_validator("security_context", "pod_security_context")
    @classmethod
    def _ids(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return value if value is None else kubernetes.passed_through(value, kubernetes.ids)
