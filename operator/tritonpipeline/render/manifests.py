"""TritonPipeline + compiled artifacts -> Kubernetes objects, as plain dicts (pure, deterministic).

Routing objects live in render/routing_objects.py, autoscaling objects and queries in
render/autoscaling_objects.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..compiler import Artifacts, tracing
from ..errors import Problem, SpecError
from ..settings import GROUP, Settings
from ..spec import NVIDIA_GPU, GcsOptions, ModelRepository, S3Options, TritonPipeline
from ..triton.addresses import IPV6_ANY, listen_args, loopback
from . import access, autoscaling_objects, checks, packing
from .disruption import PDB_API, disruption_budget, strategy
from .meta import (
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    PIPELINE_LABEL,
    configmap_name,
    labels,
    owner_reference,
    selector_labels,
)
from .meta import metadata as _meta
from .meta import plain_copy as _copy
from .routing_objects import RoutingChildren, client_ip_timeout, routing_children
from .security_context import container_security, init_security, pod_security

GENERATED_DIR = "/tp/generated"
SOURCE_DIR = "/tp/source"
# the init container's credentials and CA bundle for s3:// and gs:// sources (never in Triton's container)
CREDENTIALS_DIR = "/tp/credentials"
GCS_KEY_FILE = "key.json"
CA_DIR = "/tp/ca"
CA_FILE = "ca.crt"
# boto3 reads no variable for the addressing style: assemble.py passes this one into its client
S3_ADDRESSING_ENV = "TRITONPIPELINE_S3_ADDRESSING_STYLE"
MODELS_DIR = "/tp/models"
REPOSITORY_DIR = f"{MODELS_DIR}/repository"
HASH_ANNOTATION = f"{GROUP}/repository-hash"
# earlier ReplicaSets a Deployment keeps (`kubectl rollout undo` reaches them), each with its ConfigMaps
REVISION_HISTORY = 3
METRIC_NAMES = autoscaling_objects.METRIC_NAMES

__all__ = [
    "GRPC_PORT",
    "HASH_ANNOTATION",
    "HTTP_PORT",
    "METRICS_PORT",
    "PDB_API",
    "PIPELINE_LABEL",
    "Children",
    "labels",
    "owner_reference",
    "render_children",
    "selector_labels",
    "strategy",
    "with_engine",
]


@dataclass(frozen=True)
class Children:
    """Every object one TritonPipeline owns, in apply order. `optional` objects need an API that only
    some clusters serve (a provider's CRDs, KEDA): the handler applies them when it is there.
    `keda_alternative` is the ScaledObject an `auto` engine gets where the operator chooses KEDA
    (with_engine), rendered with the rest and never applied as it stands."""

    configmaps: tuple[dict[str, Any], ...]
    deployment: dict[str, Any]
    service: dict[str, Any]
    hpa: dict[str, Any] | None
    routing: RoutingChildren = field(default_factory=RoutingChildren)
    scaled_object: dict[str, Any] | None = None
    network_policy: dict[str, Any] | None = None
    disruption_budget: dict[str, Any] | None = None
    keda_alternative: dict[str, Any] | None = None

    def all(self) -> list[dict[str, Any]]:
        """The objects every cluster can take (the admin-key Secret is not one: see render/access.py)."""
        return [
            *self.configmaps,
            self.deployment,
            self.service,
            *self.routing.objects,
            *([self.hpa] if self.hpa else []),
            *([self.network_policy] if self.network_policy else []),
            *([self.disruption_budget] if self.disruption_budget else []),
        ]


def configmaps(tp: TritonPipeline, artifacts: Artifacts, settings: Settings) -> list[dict[str, Any]]:
    """The generated repository split over ConfigMaps below the size limit (format: render/packing.py),
    immutable and named by their content (meta.configmap_name): a new repository is new ConfigMaps, which
    the Deployment switches to in one step, while pods of earlier ReplicaSets keep theirs."""
    too_large = checks.file_size_problems(artifacts, settings)
    if too_large:
        raise SpecError(too_large)
    parts = packing.pack(artifacts.files, artifacts.models, settings.configmap_max_bytes)
    digest = packing.parts_digest(parts)
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(configmap_name(tp, index, digest), tp, settings),
            "immutable": True,
            "data": part.data,
            **({"binaryData": part.binary_data} if part.binary_data else {}),
        }
        for index, part in enumerate(parts)
    ]


@dataclass(frozen=True)
class Source:
    """Where the init container reads the model files: its --source value, the pod's volumes, the mounts
    of both containers (a pvc:// volume; Triton follows the links into it), the init container's own
    mounts (credentials, a CA bundle) and its environment."""

    arg: str
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    init_mounts: tuple[dict[str, Any], ...] = ()
    env: tuple[dict[str, Any], ...] = ()
    env_from: tuple[dict[str, Any], ...] = ()


def _source(tp: TritonPipeline) -> Source:
    repo = tp.spec.model_repository
    scheme = repo.scheme
    if scheme == "pvc":
        claim, _, sub = repo.uri[len("pvc://") :].partition("/")
        volume = {"name": "source", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        mount = {"name": "source", "mountPath": SOURCE_DIR, "readOnly": True}
        return Source(f"{SOURCE_DIR}/{sub}".rstrip("/"), volumes=(volume,), mounts=(mount,))
    if scheme == "s3":
        return _s3_source(repo)
    if scheme == "gs":
        return _gcs_source(repo)
    raise SpecError(
        [
            Problem(
                "spec.modelRepository.uri",
                f"a local path ({repo.uri!r}) works with the CLI only; in a cluster "
                "use pvc://CLAIM/PATH, s3://BUCKET/PATH or gs://BUCKET/PATH",
            )
        ]
    )


def _env(values: Mapping[str, str | None]) -> tuple[dict[str, Any], ...]:
    return tuple({"name": k, "value": v} for k, v in values.items() if v is not None)


def _s3_source(repo: ModelRepository) -> Source:
    """s3://: credentials from secretRef as AWS_* variables (or the pod's identity: IRSA through
    spec.server.serviceAccountName); endpoint, region and CA bundle in the variables boto3 reads."""
    options = repo.s3 or S3Options()
    env = {
        "AWS_ENDPOINT_URL_S3": options.endpoint,
        "AWS_REGION": options.region,
        S3_ADDRESSING_ENV: options.addressing_style or ("path" if options.endpoint else None),
    }
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    ca = options.ca_secret_ref or options.ca_config_map_ref
    if ca is not None:
        items = [{"key": ca.key, "path": CA_FILE}]
        source = (
            {"secret": {"secretName": ca.name, "items": items}}
            if options.ca_secret_ref is not None
            else {"configMap": {"name": ca.name, "items": items}}
        )
        volumes = ({"name": "source-ca", **source},)
        mounts = ({"name": "source-ca", "mountPath": CA_DIR, "readOnly": True},)
        env["AWS_CA_BUNDLE"] = f"{CA_DIR}/{CA_FILE}"
    env_from = ({"secretRef": {"name": repo.secret_ref.name}},) if repo.secret_ref else ()
    return Source(repo.uri, volumes=volumes, init_mounts=mounts, env=_env(env), env_from=env_from)


def _gcs_source(repo: ModelRepository) -> Source:
    """gs://: the service-account key of secretRef mounted as a file for GOOGLE_APPLICATION_CREDENTIALS
    (or the pod's identity: Workload Identity through spec.server.serviceAccountName)."""
    if repo.secret_ref is None:
        return Source(repo.uri)
    key = (repo.gcs or GcsOptions()).credentials_key
    volume = {
        "name": "source-credentials",
        "secret": {"secretName": repo.secret_ref.name, "items": [{"key": key, "path": GCS_KEY_FILE}]},
    }
    mount = {"name": "source-credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True}
    env = {"GOOGLE_APPLICATION_CREDENTIALS": f"{CREDENTIALS_DIR}/{GCS_KEY_FILE}"}
    return Source(repo.uri, volumes=(volume,), init_mounts=(mount,), env=_env(env))


def _gpu_tolerations(tp: TritonPipeline) -> list[dict[str, Any]]:
    server = tp.spec.server
    tolerations = [dict(t) for t in server.tolerations]
    if server.gpus > 0 and not any(t.get("key") == NVIDIA_GPU for t in tolerations):
        tolerations.append({"key": NVIDIA_GPU, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


# requests where the spec sets neither a request nor a limit, so pods are not BestEffort (evicted first)
TRITON_REQUESTS = {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "2Gi"}
# a limit where the spec sets no memory at all, so that one pipeline cannot take a node's memory
TRITON_LIMITS = {"memory": "16Gi"}
INIT_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "256Mi"},
    "limits": {"memory": "1Gi"},
}
# replicas are spread over nodes when the spec says nothing about affinity: preferred, so that a one-node
# cluster (or a full GPU pool) still schedules them all
SPREAD_WEIGHT, HOSTNAME_TOPOLOGY = 100, "kubernetes.io/hostname"
PROBE_PERIOD_SECONDS = 5


def _with_default_requests(resources: dict[str, Any], defaults: dict[str, str]) -> dict[str, Any]:
    """`resources` with a request for each of `defaults` the spec sets neither a request nor a limit for
    (a default request above a user's limit would be refused)."""
    out = _copy(resources)
    for name, value in defaults.items():
        if name not in out.get("requests", {}) and name not in out.get("limits", {}):
            out.setdefault("requests", {})[name] = value
    return out


def _resources(tp: TritonPipeline) -> dict[str, Any]:
    server = tp.spec.server
    resources = _with_default_requests(server.resources, TRITON_REQUESTS)
    for name, value in TRITON_LIMITS.items():
        if not any(name in server.resources.get(part, {}) for part in ("requests", "limits")):
            resources.setdefault("limits", {})[name] = value
    if server.gpus > 0:
        for part in ("limits", "requests"):
            resources.setdefault(part, {})[server.gpu_resource] = str(server.gpus)
    return resources


def _init_resources(tp: TritonPipeline) -> dict[str, Any]:
    return _copy(tp.spec.server.init_resources) if tp.spec.server.init_resources else _copy(INIT_RESOURCES)


def affinity(tp: TritonPipeline) -> dict[str, Any]:
    """spec.server.affinity, else a preferred podAntiAffinity on the node, so that a node drain or failure
    does not take every replica at once. Whatever the replica count: scaling must not change the pod
    template (that would roll every pod)."""
    server = tp.spec.server
    if server.affinity:
        return _copy(server.affinity)
    term = {"labelSelector": {"matchLabels": selector_labels(tp.name)}, "topologyKey": HOSTNAME_TOPOLOGY}
    preferred = [{"weight": SPREAD_WEIGHT, "podAffinityTerm": term}]
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}


def triton_args(tp: TritonPipeline, ip_family: str = "IPv4") -> list[str]:
    """tritonserver's args: the operator's own (ports, repository, the admin APIs restricted to the key
    in the container's env, expanded by the kubelet; on an IPv6 pod network, its endpoints on IPv6), the
    trace flags of spec.server.tracing, then spec.server.args, both as written (literal_args)."""
    return [
        f"--model-repository={REPOSITORY_DIR}",
        *(listen_args(IPV6_ANY) if ip_family == "IPv6" else []),
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        "--allow-metrics=true",
        f"--allow-gpu-metrics={'true' if tp.spec.server.gpus > 0 else 'false'}",
        "--strict-readiness=true",
        *access.admin_args(),
        *literal_args(tracing.trace_args(tp.spec.server.tracing, tp.name)),
        *literal_args(tp.spec.server.args),
    ]


def literal_args(args: Iterable[str]) -> list[str]:
    """`args` as the container gets them, whatever they hold: the kubelet expands `$(VAR)` in a
    container's args (the admin key's env var among them, so `$(TRITON_ADMIN_KEY)` in spec.server.args
    would put the key on Triton's command line); each `$` doubled, `$$` is a `$` to the kubelet."""
    return [arg.replace("$", "$$") for arg in args]


def deployment(
    tp: TritonPipeline,
    artifacts: Artifacts,
    configmap_names: list[str],
    settings: Settings,
) -> dict[str, Any]:
    server = tp.spec.server
    source = _source(tp)
    volumes = [
        {
            "name": "generated",
            "projected": {"sources": [{"configMap": {"name": n}} for n in configmap_names]},
        },
        {"name": "models", "emptyDir": {"sizeLimit": server.models_size_limit}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": server.shm_size_limit}},
        *source.volumes,
    ]
    models_mount = {"name": "models", "mountPath": MODELS_DIR}
    init = {
        "name": "assemble-repository",
        "image": settings.assembler_image,
        "args": ["assemble", "--generated", GENERATED_DIR, "--source", source.arg, "--out", REPOSITORY_DIR],
        "volumeMounts": [
            {"name": "generated", "mountPath": GENERATED_DIR, "readOnly": True},
            models_mount,
            *source.mounts,
            *source.init_mounts,
        ],
        "securityContext": init_security(tp),
        "resources": _init_resources(tp),
        # its error (a missing model directory, an unreachable bucket) becomes the pod status's
        # termination message, which the operator copies into the pipeline's Ready condition
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if source.env:
        init["env"] = list(source.env)
    if source.env_from:
        init["envFrom"] = list(source.env_from)
    probe = {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": PROBE_PERIOD_SECONDS}
    drain = autoscaling_objects.drain(tp)
    readiness: dict[str, Any] = {**probe, "failureThreshold": 3}
    if drain is not None:
        # stateful: readiness also fails once preStop has marked the pod as draining
        readiness = {
            "exec": {"command": drain.readiness(loopback(settings.ip_family))},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 2,
        }
    container: dict[str, Any] = {
        "name": "tritonserver",
        "image": server.image,
        "command": ["tritonserver"],
        "args": triton_args(tp, settings.ip_family),
        "env": access.admin_env(tp),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT},
            {"name": "grpc", "containerPort": GRPC_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        # the model load budget: failures allowed at one probe a period (large models load for minutes)
        "startupProbe": {
            **probe,
            "failureThreshold": -(-server.startup_timeout_seconds // PROBE_PERIOD_SECONDS),
        },
        "readinessProbe": readiness,
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "volumeMounts": [models_mount, {"name": "dshm", "mountPath": "/dev/shm"}, *source.mounts],
        "securityContext": container_security(tp),
        "terminationMessagePolicy": "FallbackToLogsOnError",  # why Triton exited, in the pod status
    }
    if drain is None:
        container["lifecycle"] = {"preStop": {"exec": {"command": autoscaling_objects.pre_stop_wait()}}}
    else:
        container["lifecycle"] = {"preStop": {"exec": {"command": drain.pre_stop()}}}
        container["volumeMounts"].append({"name": "run", "mountPath": autoscaling_objects.DRAIN_DIR})
        volumes.append({"name": "run", "emptyDir": {"sizeLimit": "1Mi"}})  # the drain flag file
    if server.tracing is not None and server.tracing.mode == "triton":  # Triton's trace file
        container["volumeMounts"].append({"name": "traces", "mountPath": tracing.TRACE_DIR})
        volumes.append({"name": "traces", "emptyDir": {"sizeLimit": tracing.TRACE_VOLUME_SIZE}})
    resources = _resources(tp)
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "securityContext": pod_security(tp, settings.platform_ids),
        "initContainers": [init],
        "containers": [container],
        "volumes": volumes,
    }
    if server.service_account_name:  # IRSA, Workload Identity: the model source reads the token
        pod_spec["serviceAccountName"] = server.service_account_name
    else:  # nothing in the pod calls the API
        pod_spec["automountServiceAccountToken"] = False
    pull_secrets = [*(r.name for r in server.image_pull_secrets), *settings.assembler_pull_secrets]
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in dict.fromkeys(pull_secrets)]
    pod_spec["terminationGracePeriodSeconds"] = (
        drain.grace_seconds
        if drain
        else autoscaling_objects.grace_seconds(tp, autoscaling_objects.PRE_STOP_SECONDS)
    )
    if server.node_selector:
        pod_spec["nodeSelector"] = dict(server.node_selector)
    tolerations = _gpu_tolerations(tp)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    pod_spec["affinity"] = affinity(tp)
    spec: dict[str, Any] = {
        "strategy": strategy(tp),
        # each kept ReplicaSet keeps the generated ConfigMaps its pods mount (reconcile/apply.py prune)
        "revisionHistoryLimit": REVISION_HISTORY,
        "selector": {"matchLabels": selector_labels(tp.name)},
        "template": {
            "metadata": {
                "labels": labels(tp.name, settings),
                "annotations": {HASH_ANNOTATION: artifacts.digest()},
            },
            "spec": pod_spec,
        },
    }
    if tp.spec.autoscaling is None:
        spec["replicas"] = server.replicas  # with autoscaling the HPA owns replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(tp.name, tp, settings),
        "spec": spec,
    }


def service(tp: TritonPipeline, settings: Settings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": selector_labels(tp.name),
        "ports": [
            {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
            {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
            {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
        ],
    }
    if tp.spec.routing.session_affinity == "ClientIP":
        spec["sessionAffinity"] = "ClientIP"
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": client_ip_timeout(tp)}}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(tp.name, tp, settings),
        "spec": spec,
    }


def render_children(tp: TritonPipeline, artifacts: Artifacts, settings: Settings) -> Children:
    """All children of one pipeline. Raises SpecError for what only a cluster cannot serve."""
    found = checks.problems(tp, artifacts, settings)
    if found:
        raise SpecError(found)
    cms = configmaps(tp, artifacts, settings)
    names = [c["metadata"]["name"] for c in cms]
    return Children(
        configmaps=tuple(cms),
        deployment=deployment(tp, artifacts, names, settings),
        service=service(tp, settings),
        hpa=autoscaling_objects.hpa(tp, settings),
        routing=routing_children(tp, settings),
        scaled_object=autoscaling_objects.scaled_object(tp, settings),
        network_policy=access.network_policy(tp, settings),
        disruption_budget=disruption_budget(tp, settings),
        keda_alternative=(
            autoscaling_objects.scaled_object(tp, settings, "keda")
            if autoscaling_objects.may_choose_keda(tp)
            else None
        ),
    )


def with_engine(children: Children, engine: autoscaling_objects.Engine | None) -> Children:
    """The children with the autoscaler of `engine` (the operator's resolution of `auto`:
    autoscaling_objects.choose): render_children made the HPA, asking no cluster; KEDA takes its
    place with the ScaledObject rendered beside it (`keda_alternative`)."""
    if engine != "keda" or children.keda_alternative is None:
        return children
    return replace(children, hpa=None, scaled_object=children.keda_alternative, keda_alternative=None)


def endpoint(tp: TritonPipeline) -> str:
    ns = tp.metadata.namespace or "default"
    return f"{tp.name}.{ns}.svc:{GRPC_PORT}"
