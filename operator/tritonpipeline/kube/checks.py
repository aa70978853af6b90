"""What a cluster would refuse, or quietly get wrong, about a TritonPipeline (pure).

One home for these rules: `problems` are what the generated Kubernetes objects must satisfy (every name
derived from metadata.name or from pipeline names, the ConfigMap size limit); `warnings` are what is
allowed but probably a mistake. The operator refuses a spec with `problems` (render_children), and
`tritonpipeline validate` and the admission webhook (webhook.py) report both through `check`, so the
three cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import advisories
from ..compiler import Artifacts, compile_pipeline
from ..errors import Problem, SpecError
from ..settings import Settings
from ..spec import DNS_SUBDOMAIN_RE, K8S_NAME_RE, LABEL_VALUE_RE, TritonPipeline
from . import packing, routing
from .meta import configmap_name


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
# measured on the real tritonserver (tests/test_sequence_controls.py): the sequence batcher's STRING
# correlation-ID tensor fails Triton's check of string inputs before the Python model runs
STRING_CORRELATION_ID_ON_PYTHON = (
    "a STRING correlationId control fails every request of a Python-backend model in Triton ('unexpected "
    "number of string elements 2 for inference input {name!r}'); leave correlationId out and read the ID "
    "in the model with request.correlation_id(), which carries string IDs whole"
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
        DerivedName("the ConfigMap", configmap_name(tp, 0), base, meta, DNS_1123_SUBDOMAIN),
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
    """Generated files too large for one ConfigMap (the repository is split by file, never inside one)."""
    limit = settings.configmap_max_bytes
    return [
        Problem("spec", packing.too_large_message(path, artifacts.files[path], limit))
        for path in packing.too_large(artifacts.files, artifacts.models, limit)
    ]


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


def problems(tp: TritonPipeline, artifacts: Artifacts, settings: Settings | None = None) -> list[Problem]:
    """Everything the cluster would refuse, or quietly get wrong, about the objects rendered for this spec."""
    return [*name_problems(tp), *mig_problems(tp), *file_size_problems(artifacts, settings or Settings())]


def check(
    tp: TritonPipeline, settings: Settings | None = None, *, cpu_only: bool = False
) -> tuple[Artifacts | None, list[Problem]]:
    """The compiler's problems, or else the cluster's, of a parsed spec: what `tritonpipeline validate`
    and the admission webhook refuse (the operator refuses the same in render_children)."""
    try:
        artifacts = compile_pipeline(tp, cpu_only=cpu_only)
    except SpecError as exc:
        return None, exc.problems
    return artifacts, problems(tp, artifacts, settings)


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
    outdated = advisories.warning(tp.spec.server.image)
    if outdated:
        found.append(Problem("spec.server.image", outdated))
    broken = routing.affinity_problem(tp)
    if broken:
        found.append(Problem("spec.routing.sessionAffinity", broken))
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
    route = tp.spec.routing
    if route.session_affinity == "Header" and route.provider == "gateway-api":
        found.append(Problem("spec.routing.provider", routing.GATEWAY_SESSION_CAVEAT))
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
