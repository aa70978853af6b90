"""What a cluster would refuse, or quietly get wrong, about a TritonPipeline (pure).

One home for these rules: `problems` are what the generated Kubernetes objects must satisfy (every name
derived from metadata.name or from pipeline names, the ConfigMap size limit); `warnings` are what is
allowed but probably a mistake. The operator refuses a spec with `problems` (render_children), and
`tritonpipeline validate` and the admission webhook (runtime/admission.py) report both through `check`,
so the three cannot disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..compiler import Artifacts, compile_pipeline, graph_problems_beside
from ..compiler.plan_types import is_input_ref
from ..compiler.resolve import resolve_pipeline
from ..compiler.router_choice import choose_router
from ..compiler.triton_config import readable_extra_config
from ..errors import Problem, SpecError
from ..settings import Settings
from ..spec import (
    DNS_SUBDOMAIN_RE,
    K8S_NAME_RE,
    LABEL_VALUE_RE,
    NEWER_FIELDS,
    Model,
    TritonPipeline,
    kubernetes,
    newer_fields,
    parse_pipeline,
)
from ..triton import advisories, tritonserver_options
from . import packing
from . import routing_objects as routing
from .meta import CONFIGMAP_DIGEST_CHARS, configmap_name
from .security_context import container_security, pod_security


@dataclass(frozen=True)
class NameRule:
    """One of Kubernetes' name rules: what the API server checks, in words for the error."""

    pattern: re.Pattern[str]
    most: int
    words: str
    chars: str


DNS_1035_LABEL = NameRule(
    K8S_NAME_RE, 63, "a DNS-1035 label", "lowercase letters, digits and '-', starting with a letter"
)
DNS_1123_SUBDOMAIN = NameRule(
    DNS_SUBDOMAIN_RE, 253, "a DNS-1123 subdomain", "lowercase letters, digits, '-' and '.'"
)
LABEL_VALUE = NameRule(
    LABEL_VALUE_RE,
    63,
    "a label value",
    "letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
)
# bytes of a ConfigMap beside its data (keys, the manifest, metadata): a file needs this much room
SECRET_SCHEMES = ("s3", "gs")  # the sources that read modelRepository.secretRef
HOST_POLICY_UNDEFINED = (
    "ignored: no --host-policy={name},SETTING=VALUE in spec.server.args defines host policy {name!r}, so "
    "Triton runs the group with no host policy settings"
)
RESPONSE_CACHE_OFF = (
    "ignored: the model's response_cache caches nothing unless spec.server.args gives tritonserver a "
    "cache (--cache-config=local,size=BYTES)"
)
NOT_LOADED_EXPLICIT = (
    "not served: --model-control-mode=explicit in spec.server.args loads only the models --load-model "
    "names (an ensemble with its steps), and none names pipeline {name!r}, so the pods report ready and "
    "answer 'unknown model'; leave --model-control-mode out (the whole repository loads) or add "
    "--load-model={name}"
)
RATE_LIMITER_OFF = (
    "ignored: Triton runs without its rate limiter unless spec.server.args has "
    "--rate-limit=execution_count (its default, off, ignores every rateLimiter)"
)
# measured on the real tritonserver (tests/component/test_sequence_controls.py): the sequence batcher's STRING
# correlation-ID tensor fails Triton's check of string inputs before the Python model runs
STRING_CORRELATION_ID_ON_PYTHON = (
    "a STRING correlationId control fails every request of a Python-backend model in Triton ('unexpected "
    "number of string elements 2 for inference input {name!r}'); leave correlationId out and read the ID "
    "in the model with request.correlation_id(), which carries string IDs whole"
)

# measured on the real tritonserver: under fanOut: shared, a tensor that is a pipeline output and a step
# input at once fails a request asking for only some outputs ("unexpected deadlock, at least one output
# is not set while no more ensemble steps can be made"); the router (fanOut: router) serves every subset
SHARED_OUTPUT_SUBSET = (
    "under fanOut: shared, {ref} is pipeline output {output!r} and feeds {consumers}: Triton fails a request "
    "asking for only some of the pipeline's outputs ('unexpected deadlock, at least one output is not "
    "set'); fanOut: router (the default) serves every subset"
)


@dataclass(frozen=True)
class DerivedName:
    """A name the renderers build from a spec field: `what` it names, the `base` taken from `path`."""

    what: str
    name: str
    base: str
    path: str
    rule: NameRule

    def problem(self) -> Problem | None:
        rule = self.rule
        if rule.pattern.fullmatch(self.name):
            return None
        made = f"{self.what} {self.name!r} is made from it and must be {rule.words}"
        if len(self.name) > rule.most:
            room = rule.most - (len(self.name) - len(self.base))
            shorten = f"shorten the pipeline name to {room}"
            return Problem(self.path, f"{made} of at most {rule.most} characters: {shorten}")
        return Problem(self.path, f"{made}: {rule.chars}")


def derived_names(tp: TritonPipeline) -> list[DerivedName]:
    """Every name of a Kubernetes object or label value the renderers derive from this spec."""
    base, meta = tp.name, "metadata.name"
    names = [
        DerivedName("the Service", base, base, meta, DNS_1035_LABEL),
        DerivedName("the Deployment", base, base, meta, DNS_1123_SUBDOMAIN),
        DerivedName(
            "the ConfigMap",
            configmap_name(tp, 0, "0" * CONFIGMAP_DIGEST_CHARS),
            base,
            meta,
            DNS_1123_SUBDOMAIN,
        ),
        DerivedName("the label app.kubernetes.io/instance", base, base, meta, LABEL_VALUE),
    ]
    route = tp.spec.routing
    if route.session_affinity == "Header":
        headless = routing.headless_name(tp)
        names.append(DerivedName("the headless Service", headless, base, meta, DNS_1035_LABEL))
        if route.provider == "ingress-nginx":
            names += [
                DerivedName("the Ingress", routing.ingress_name(tp, kind), base, meta, DNS_1123_SUBDOMAIN)
                for kind in routing.INGRESS_KINDS
            ]
    return names


def name_problems(tp: TritonPipeline) -> list[Problem]:
    """Derived names the API server would refuse, at the field they come from."""
    return [p for n in derived_names(tp) if (p := n.problem()) is not None]


def file_size_problems(artifacts: Artifacts, settings: Settings) -> list[Problem]:
    """Generated files too large for one ConfigMap (the repository is split by file, never inside one),
    and a repository larger than a pipeline may generate (issue 54: a 0.98 MB spec became 8.7 MB of
    ConfigMaps; about 200 such fill etcd)."""
    limit = settings.configmap_max_bytes
    found = [
        Problem("spec", packing.too_large_message(path, artifacts.files[path], limit))
        for path in packing.too_large(artifacts.files, artifacts.models, limit)
    ]
    total = sum(len(data) for data in artifacts.files.values())
    if total > settings.max_generated_bytes:
        words = GENERATED_TOO_LARGE.format(
            size=total, files=len(artifacts.files), limit=settings.max_generated_bytes
        )
        found.append(Problem("spec", words))
    return found


GENERATED_TOO_LARGE = (
    "the generated repository would hold {size} bytes in {files} files, more than the {limit} a pipeline "
    "may generate (TRITONPIPELINE_MAX_GENERATED_BYTES, chart value operator.maxGeneratedBytes: etcd keeps "
    "every ConfigMap); split the pipeline into several, or ask the cluster admin to raise the limit"
)


MIG_PREFIX = "nvidia.com/mig-"  # the device plugin's MIG resources, e.g. nvidia.com/mig-1g.10gb
MIG_ONE_DEVICE = (
    "a MIG resource ({resource}) gives a pod one MIG device that one process can use: set gpus to 1, "
    "or request a whole GPU (nvidia.com/gpu)"
)
MIG_NO_METRICS = (
    "gpuUtilization cannot scale on a MIG resource ({resource}): Triton reads no GPU metrics from MIG "
    "devices, so the value never moves; use queueTime or pendingRequests"
)


def mig_problems(tp: TritonPipeline) -> list[Problem]:
    """MIG: one device per process, and no GPU metrics from Triton."""
    server = tp.spec.server
    if not server.gpu_resource.startswith(MIG_PREFIX):
        return []
    found = []
    if server.gpus > 1:
        found.append(Problem("spec.server.gpus", MIG_ONE_DEVICE.format(resource=server.gpu_resource)))
    auto = tp.spec.autoscaling
    if auto is not None and auto.metric == "gpuUtilization":
        found.append(Problem("spec.autoscaling.metric", MIG_NO_METRICS.format(resource=server.gpu_resource)))
    return found


# --------------------------------------------------------------------------- privilege

ADMIN_GRANT = (
    "; a TritonPipeline gets no more than Pod Security 'restricted' allows unless the cluster admin "
    "grants it, in every namespace or in this one (chart values security.allowPrivilegedPipelines, "
    "security.privilegedNamespaces)"
)
RESTRICTED_FORBIDS = "{what}: Pod Security 'restricted' forbids it" + ADMIN_GRANT
SERVICE_ACCOUNT_NOT_ALLOWED = (
    "service account {name!r} is not one the cluster admin allows for Triton pods in namespace {namespace!r} "
    "({allowed}); without serviceAccountName they run as the namespace's default service account (chart "
    "value security.allowedServiceAccounts)"
)
NAMESPACE_REFUSED = (
    "pipelines are refused in namespace {namespace!r}, one of the cluster's own ({refused}; chart value "
    "security.refusedNamespaces)"
)
IMAGE_NOT_ALLOWED = (
    "image {image!r} is not from a registry the cluster admin allows ({allowed}; chart value "
    "security.allowedImageRegistries)"
)
# Pod Security Standards, restricted: what each field may be (kubernetes.io/docs/concepts/security/
# pod-security-standards); the operator's defaults (render/manifests.py) satisfy every one
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})


def _shared_violations(ctx: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, what) a pod's or a container's securityContext breaks."""
    if ctx.get("runAsNonRoot") is False:
        yield "runAsNonRoot", "runAsNonRoot: false"
    if ctx.get("runAsUser") == 0:
        yield "runAsUser", "runAsUser: 0 (root)"
    seccomp = ctx.get("seccompProfile") or {}
    if seccomp and seccomp.get("type") not in SECCOMP_TYPES:
        yield (
            "seccompProfile.type",
            f"seccompProfile type {seccomp.get('type')!r} (RuntimeDefault or Localhost)",
        )
    selinux = ctx.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in SELINUX_TYPES:
        yield "seLinuxOptions.type", f"seLinuxOptions type {selinux.get('type')!r}"
    for key in ("user", "role"):
        if selinux.get(key):
            yield f"seLinuxOptions.{key}", f"seLinuxOptions {key}"
    if (ctx.get("windowsOptions") or {}).get("hostProcess"):
        yield "windowsOptions.hostProcess", "a Windows HostProcess container"
    if (ctx.get("appArmorProfile") or {}).get("type") == "Unconfined":
        yield "appArmorProfile.type", "AppArmor profile Unconfined"


def pod_violations(ctx: dict[str, Any]) -> Iterator[tuple[str, str]]:
    yield from _shared_violations(ctx)
    if ctx.get("runAsNonRoot") is None:  # false: reported above
        yield "runAsNonRoot", "a pod that may run as root (runAsNonRoot must be true)"
    if not (ctx.get("seccompProfile") or {}).get("type"):
        yield "seccompProfile", "no seccomp profile (RuntimeDefault or Localhost)"
    for j, sysctl in enumerate(ctx.get("sysctls") or []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"sysctls[{j}]", f"the sysctl {sysctl.get('name')!r}"


def container_violations(ctx: dict[str, Any]) -> Iterator[tuple[str, str]]:
    yield from _shared_violations(ctx)
    if ctx.get("privileged"):
        yield "privileged", "a privileged container"
    if ctx.get("allowPrivilegeEscalation") is not False:
        yield "allowPrivilegeEscalation", "privilege escalation (allowPrivilegeEscalation must be false)"
    caps = ctx.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        yield "capabilities.drop", "capabilities not dropped (drop must hold ALL)"
    for j, cap in enumerate(caps.get("add") or []):
        if cap != "NET_BIND_SERVICE":
            yield f"capabilities.add[{j}]", f"the added capability {cap!r}"
    if ctx.get("procMount") not in (None, "Default"):
        yield "procMount", f"procMount {ctx.get('procMount')!r}"


def _allowed_account(name: str, namespace: str, allowed: tuple[str, ...]) -> bool:
    return any(a in ("*", name, f"{namespace}/{name}") for a in allowed)


DOCKER_HUB = "docker.io"  # the registry of an image reference that names none
DOCKER_HUB_LEGACY = "index.docker.io"  # the runtimes' other name for it


def registry(image: str) -> str:
    """The registry host of an image reference (Docker Hub's for a name without one), lowercase (host
    names are case-insensitive)."""
    host = (kubernetes.image_host(image)[0] or DOCKER_HUB).lower()
    return DOCKER_HUB if host == DOCKER_HUB_LEGACY else host


def full_reference(image: str) -> str:
    """An image reference as containerd and `docker save` name it (Docker Hub's defaults filled in)."""
    if registry(image) != DOCKER_HUB or image.startswith(f"{DOCKER_HUB}/"):
        return image
    return f"{DOCKER_HUB}/{image}" if "/" in image else f"{DOCKER_HUB}/{kubernetes.DOCKER_HUB_LIBRARY}{image}"


def privilege_problems(tp: TritonPipeline, settings: Settings) -> list[Problem]:
    """What a TritonPipeline may not obtain through the pods the operator creates for it, unless the cluster
    admin's settings allow it: pods in the cluster's own namespaces, more than Pod Security 'restricted'
    (judged on the securityContexts as rendered, the spec's merged over the defaults), another service
    account, another registry."""

    server = tp.spec.server
    namespace = tp.metadata.namespace or "default"
    found: list[Problem] = []
    if namespace in settings.refused_namespaces:
        refused = ", ".join(settings.refused_namespaces)
        found.append(
            Problem("metadata.namespace", NAMESPACE_REFUSED.format(namespace=namespace, refused=refused))
        )
    if not (settings.allow_privileged or namespace in settings.privileged_namespaces):
        for field_name, violations in (
            ("podSecurityContext", pod_violations(pod_security(tp, settings.platform_ids))),
            ("securityContext", container_violations(container_security(tp))),
        ):
            for where, what in violations:
                found.append(
                    Problem(f"spec.server.{field_name}.{where}", RESTRICTED_FORBIDS.format(what=what))
                )
    account = server.service_account_name
    if account and not _allowed_account(account, namespace, settings.allowed_service_accounts):
        allowed = ", ".join(settings.allowed_service_accounts) or "none allowed"
        message = SERVICE_ACCOUNT_NOT_ALLOWED.format(name=account, namespace=namespace, allowed=allowed)
        found.append(Problem("spec.server.serviceAccountName", message))
    registries = settings.allowed_image_registries
    if registries and registry(server.image) not in registries:
        message = IMAGE_NOT_ALLOWED.format(image=server.image, allowed=", ".join(registries))
        found.append(Problem("spec.server.image", message))
    return found


def problems(tp: TritonPipeline, artifacts: Artifacts, settings: Settings | None = None) -> list[Problem]:
    """Everything the cluster would refuse, or quietly get wrong, about the objects rendered for this spec,
    and what the cluster admin does not grant a TritonPipeline."""
    settings = settings or Settings()
    return [
        *name_problems(tp),
        *mig_problems(tp),
        *privilege_problems(tp, settings),
        *file_size_problems(artifacts, settings),
    ]


@dataclass(frozen=True)
class Verdict:
    """What `validate` says of one TritonPipeline document: refused for any problem; the warnings are
    printed either way (by kubectl at admission). `pipeline` and `artifacts` where it parsed and compiled
    (neither compared; `bare` leaves them out: what a compile worker sends back)."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    newer: list[str] = field(default_factory=list)  # fields of a newer CRD left out (a stored object's)
    pipeline: TritonPipeline | None = field(default=None, compare=False, repr=False)
    artifacts: Artifacts | None = field(default=None, compare=False, repr=False)

    @property
    def allowed(self) -> bool:
        return not self.problems

    def message(self) -> str:
        """Every problem on its own line, `path: message`, as `tritonpipeline validate` prints them."""
        return "\n".join(map(str, self.problems))

    def bare(self) -> Verdict:
        return replace(self, pipeline=None, artifacts=None)

    def valid(self) -> tuple[TritonPipeline, Artifacts]:
        """The pipeline and its compiled repository. Raises SpecError with the problems."""
        if self.problems or self.pipeline is None or self.artifacts is None:
            raise SpecError(self.problems)
        return self.pipeline, self.artifacts


def validate(
    doc: Mapping[str, Any], settings: Settings | None = None, *, stored: bool = False, cpu_only: bool = False
) -> Verdict:
    """The one check of a TritonPipeline document, which `tritonpipeline validate`, the admission webhook
    and the operator all make: its schema (spec/), the compiler's rules on its graph (compiler/; with
    the schema's problems where the graph is readable, so every problem comes at once), then what the
    cluster would refuse (`problems`), and the warnings of a valid one.

    `stored`: a document the API server holds or sends for admission. A field its CRD does not define is
    then a newer CRD's (left out, named in `newer` and a warning, never refused), and its routers are
    compiled as the operator's settings choose (compiler/router_choice.py). In a user's file (not
    stored) an unknown field is a typo."""
    settings = settings or Settings()
    newer: list[str] = []
    try:
        tp = parse_pipeline(dict(doc), beside=graph_problems_beside, newer=newer if stored else None)
    except SpecError as exc:
        return Verdict(exc.problems, newer_warning(newer), newer)
    router = choose_router(tp, settings.router) if stored else None
    try:
        artifacts = compile_pipeline(tp, cpu_only=cpu_only, router=router)
    except SpecError as exc:
        return Verdict(exc.problems, newer_warning(newer), newer, tp)
    found = problems(tp, artifacts, settings)
    return Verdict(found, newer_warning(newer) + ([] if found else warnings(tp)), newer, tp, artifacts)


def newer_warning(newer: list[str]) -> list[Problem]:
    """The warning naming the fields of a newer CRD that this operator ignores, if any."""
    return [Problem(newer_fields(newer), NEWER_FIELDS)] if newer else []


def _caches(model: Model) -> bool:
    """The model's extraConfig enables Triton's response cache."""
    extra = readable_extra_config(model)
    return extra is not None and extra.response_cache.enable


def _fan_out_warnings(tp: TritonPipeline) -> Iterator[Problem]:
    """Under fanOut: shared, a step output that is a pipeline output and a step's input fails a request
    for some of the outputs (SHARED_OUTPUT_SUBSET), at the pipeline output's `from`."""
    for j, pipeline in enumerate(tp.spec.pipelines):
        if pipeline.fan_out != "shared":
            continue
        g = resolve_pipeline(tp.spec, j)
        exposed = {o.name: k for k, o in enumerate(pipeline.outputs)}
        for ref, consumers in g.consumers.items():
            names = [c.name for c in consumers if c.step is None]
            steps = sorted({f"step {c.step!r}" for c in consumers if c.step is not None})
            if is_input_ref(ref) or not names or not steps:
                continue
            where = f"spec.pipelines[{j}].outputs[{exposed[names[0]]}].from"
            words = {"ref": ref, "output": names[0], "consumers": ", ".join(steps)}
            yield Problem(where, SHARED_OUTPUT_SUBSET.format(**words))


def warnings(tp: TritonPipeline) -> list[Problem]:
    """Allowed, but probably not what the user wants: each at its field path."""
    found = []
    for i, model in enumerate(tp.spec.models):
        sb = model.sequence_batching
        if (
            model.backend == "python"
            and sb
            and sb.controls.correlation_id
            and sb.controls.correlation_id_data_type == "STRING"
        ):
            found.append(
                Problem(
                    f"spec.models[{i}].sequenceBatching.controls.correlationIdDataType",
                    STRING_CORRELATION_ID_ON_PYTHON.format(name=sb.controls.correlation_id),
                )
            )
    loaded = tritonserver_options.models_loaded(tp.spec.server.args)
    if loaded is not None:
        found += [
            Problem(f"spec.pipelines[{i}].name", NOT_LOADED_EXPLICIT.format(name=pipeline.name))
            for i, pipeline in enumerate(tp.spec.pipelines)
            if pipeline.name not in loaded
        ]
    if tritonserver_options.rate_limit_mode(tp.spec.server.args) != "execution_count":
        found += [
            Problem(f"spec.models[{i}].instances[{j}].rateLimiter", RATE_LIMITER_OFF)
            for i, model in enumerate(tp.spec.models)
            for j, inst in enumerate(model.instances)
            if inst.rate_limiter is not None
        ]
    defined = tritonserver_options.host_policies(tp.spec.server.args)
    found += [
        Problem(
            f"spec.models[{i}].instances[{j}].hostPolicy", HOST_POLICY_UNDEFINED.format(name=inst.host_policy)
        )
        for i, model in enumerate(tp.spec.models)
        for j, inst in enumerate(model.instances)
        if inst.host_policy is not None and inst.host_policy not in defined
    ]
    if not tritonserver_options.response_cache_on(tp.spec.server.args):
        found += [
            Problem(f"spec.models[{i}].extraConfig", RESPONSE_CACHE_OFF)
            for i, model in enumerate(tp.spec.models)
            if _caches(model)
        ]
    outdated = advisories.warning(tp.spec.server.image)
    if outdated:
        found.append(Problem("spec.server.image", outdated))
    broken = routing.affinity_problem(tp)
    if broken:
        found.append(Problem("spec.routing.sessionAffinity", broken))
    found += _fan_out_warnings(tp)
    if tp.spec.server.gpus == 0:
        found += [
            Problem(
                f"spec.models[{i}].instances[{j}].gpus",
                f"ignored: spec.server.gpus is 0 (CPU only), so this GPU group runs on the CPU and its GPU "
                f"indices {inst.gpus} are dropped",
            )
            for i, model in enumerate(tp.spec.models)
            for j, inst in enumerate(model.instances)
            if inst.gpus
        ]
    no_tls = routing.ingress_problem(tp)
    if no_tls:
        found.append(Problem("spec.routing.tlsSecretName", no_tls))
    route = tp.spec.routing
    if route.session_affinity == "Header" and route.gateway and route.gateway.implementation == "standard":
        found.append(Problem("spec.routing.gateway.implementation", routing.GATEWAY_SESSION_CAVEAT))
    if route.session_affinity == "Header" and route.provider == "ingress-nginx":
        found.append(Problem("spec.routing.provider", routing.INGRESS_NGINX_RETIRED))
    repo = tp.spec.model_repository
    if repo.secret_ref is not None and repo.scheme not in SECRET_SCHEMES:
        where = "a local path" if repo.scheme == "local" else f"a {repo.scheme}:// uri"
        found.append(
            Problem(
                "spec.modelRepository.secretRef",
                f"secretRef {repo.secret_ref.name!r} is ignored: only s3:// and gs:// sources read "
                f"credentials, and the uri is {where}",
            )
        )
    return found
