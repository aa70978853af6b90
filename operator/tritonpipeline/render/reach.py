"""What a pipeline reaches on its author's behalf, and the signed record of who may (pure).

The operator's service account creates a pipeline's objects and mounts what its spec names. Without a
check, whoever may create a TritonPipeline would get through it what their own RBAC denies: an Ingress
for another team's host, a KEDA trigger fetching any address from KEDA's network position, any Secret of
the namespace in a container running their code (issue 54). So each thing a pipeline reaches is a
`Reach` item: a kind the operator creates for it, an object the spec names (a Secret, a PVC, a ConfigMap,
another namespace's Gateway), or a host, ingress class or metrics address it writes into what it creates.

An item passes when the admin lists it (Settings: trusted_kinds, allowed_hosts, allowed_ingress_classes,
allowed_metrics_addresses, shared_gateway_namespaces) or when the pipeline's author may do it themselves:
the admission webhook asks the API server (a SubjectAccessReview per item, reconcile/authors.py) and
records what passed on the pipeline (`RECORD_ANNOTATION`, signed with a key only the operator holds).
Each reconcile renders the same items and goes on only where every one is listed or recorded; otherwise
the pipeline is refused with the field path, and what it already runs is left as it is.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import hmac
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..compiler import tracing
from ..errors import Problem
from ..settings import GROUP, Settings
from ..spec import DNS_LABEL_RE, TritonPipeline
from ..triton import tritonserver_options
from . import access, autoscaling_objects
from .manifests import Children
from .meta import plural
from .routing_objects import GATEWAY_API

DEPLOYMENT_API = ("apps/v1", "Deployment")  # what carries a trace collector's URL (its pods' args)
# on the pipeline: what its author was found allowed to reach, signed (`record`)
RECORD_ANNOTATION = f"{GROUP}/reviewed-access"

# the spec field that makes an object of each optional kind; the others come from the spec as a whole
KIND_FIELDS = {
    "Ingress": "spec.routing",
    "HTTPRoute": "spec.routing",
    "GRPCRoute": "spec.routing",
    "DestinationRule": "spec.routing",
    "BackendTrafficPolicy": "spec.routing",
    "UpstreamSettingsPolicy": "spec.routing",
    "HorizontalPodAutoscaler": "spec.autoscaling",
    "ScaledObject": "spec.autoscaling",
    "NetworkPolicy": "spec.networkPolicy",
    "Secret": "spec.server",  # the admin-key Secret, made when spec.server.adminKeySecretRef is unset
}

# the refusals (the webhook's and each reconcile's), and what an item is in words
DENIED = "{user} may not {words}, which the operator would do on the pipeline's behalf; {allow}"
NOT_RECORDED = (
    "not reviewed: no record that this pipeline's author may {words} (annotation {annotation}); "
    "{allow}; apply the pipeline again so that the admission webhook reviews its author"
)
NO_NAME = (
    "required with the access review (a generated name comes after the review, so its record could not "
    "name the pipeline): give the pipeline a name"
)
NO_WEBHOOK = (
    "not reviewed: the admission webhook is off, so nobody asked whether this pipeline's author may "
    "{words}; {allow}"
)
# the end of each refusal: what else could allow the item
LISTED_BY = "an admin may allow it for every author (chart value {setting})"
NOT_LISTABLE = "only the author's own access counts for a Secret, PVC or ConfigMap the pods are given"


@dataclass(frozen=True, order=True)
class Reach:
    """One thing a pipeline reaches: what its author would need to do it themselves (`verb` on
    `resource`.`group`, the object `name` or any, in `namespace`), the spec `field` asking for it, the
    `detail` (a host, an ingress class, an address) that an admin list may allow, and whether one does."""

    field: str
    verb: str
    group: str
    resource: str
    namespace: str
    name: str = ""
    detail: str = ""
    listed: bool = False
    setting: str = "trusted_kinds"  # the admin list that could allow it (Settings' field)
    # reviewed, recorded when allowed, never refused: what the pipeline may get instead of what it has
    # (the ScaledObject of an `auto` autoscaling engine, made only where its items are allowed)
    optional: bool = dataclasses.field(default=False, compare=False)

    @property
    def key(self) -> str:
        """The item as the record keeps it (the same on every render of the same spec)."""
        kind = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f"{self.namespace}/{self.name}" if self.name else self.namespace
        return f"{self.verb} {kind} {where}" + (f" {self.detail}" if self.detail else "")

    def words(self) -> str:
        kind = f"{self.resource}.{self.group}" if self.group else self.resource
        what = f"{self.verb} {kind} {self.name}" if self.name else f"{self.verb} {kind}"
        return f"{what} in namespace {self.namespace}" + (f" ({self.detail})" if self.detail else "")

    def attributes(self) -> dict[str, str]:
        """The SubjectAccessReview's resourceAttributes that say whether the author may do it."""
        found = {
            "namespace": self.namespace,
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
        }
        return {**found, "name": self.name} if self.name else found


def listed(entries: Sequence[str], namespace: str, value: str) -> bool:
    """Whether an admin list allows `value` in `namespace`: an entry `PATTERN` (any namespace) or
    `NAMESPACE/PATTERN`, shell-style (`*.team-a.example.com`, `team-a/http://prometheus.team-a.svc:*`)."""
    for entry in entries:
        head, slash, rest = entry.partition("/")
        where, pattern = (head, rest) if slash and DNS_LABEL_RE.fullmatch(head) else ("", entry)
        if (not where or where == namespace) and fnmatch.fnmatchcase(value, pattern):
            return True
    return False


def locations(spec: Any, path: str = "spec") -> dict[str, str]:
    """Each text of the spec as written, and the claim of each pvc:// URL (`pvc://CLAIM/...`), mapped to
    the first field holding it in a depth-first walk: where a rendered object's reference came from (a
    text not there: the operator's own, a setting or a derived name). One walk for all the references
    of a pipeline (a 0.9 MB spec: a walk per reference took 0.18 s)."""
    found: dict[str, str] = {}
    stack: list[tuple[str, Any]] = [(path, spec)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, str):
            found.setdefault(node, at)
            if node.startswith("pvc://"):
                parts = node[len("pvc://") :].split("/")
                for end in range(1, len(parts) + 1):  # the claim, and any longer prefix, as before
                    found.setdefault("/".join(parts[:end]), at)
        elif isinstance(node, Mapping):
            stack.extend(reversed([(f"{at}.{k}", v) for k, v in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(f"{at}[{i}]", v) for i, v in enumerate(node)]))
    return found


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _pod_references(pod: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(kind, name) of every Secret, ConfigMap and PVC a pod spec names."""
    for volume in pod.get("volumes") or []:
        if "secret" in volume:
            yield "Secret", volume["secret"].get("secretName", "")
        if "configMap" in volume:
            yield "ConfigMap", volume["configMap"].get("name", "")
        if "persistentVolumeClaim" in volume:
            yield "PersistentVolumeClaim", volume["persistentVolumeClaim"].get("claimName", "")
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                yield "Secret", source["secret"].get("name", "")
            if "configMap" in source:
                yield "ConfigMap", source["configMap"].get("name", "")
    for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        for env in container.get("env") or []:
            ref = env.get("valueFrom") or {}
            if "secretKeyRef" in ref:
                yield "Secret", ref["secretKeyRef"].get("name", "")
            if "configMapKeyRef" in ref:
                yield "ConfigMap", ref["configMapKeyRef"].get("name", "")
        for source in container.get("envFrom") or []:
            if "secretRef" in source:
                yield "Secret", source["secretRef"].get("name", "")
            if "configMapRef" in source:
                yield "ConfigMap", source["configMapRef"].get("name", "")
    for secret in pod.get("imagePullSecrets") or []:
        yield "Secret", secret.get("name", "")


def _details(obj: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(what, value, the Settings list that may allow it) an object carries that an admin may list."""
    spec = obj.get("spec") or {}
    for rule in spec.get("rules") or []:
        if isinstance(rule, Mapping) and rule.get("host"):
            yield "host", str(rule["host"]), "allowed_hosts"
    for host in spec.get("hostnames") or []:
        yield "host", str(host), "allowed_hosts"
    if spec.get("ingressClassName"):
        yield "ingress class", str(spec["ingressClassName"]), "allowed_ingress_classes"
    for trigger in spec.get("triggers") or []:
        address = (trigger.get("metadata") or {}).get("serverAddress")
        if address:
            yield "metrics address", str(address), "allowed_metrics_addresses"


def reach(tp: TritonPipeline, children: Children, settings: Settings, spec: Mapping[str, Any]) -> list[Reach]:
    """Every item the pipeline reaches once rendered as `children`, each once, sorted; `spec`: the spec
    as written (the references found there are the author's; the rest the operator's own)."""
    scaled = [children.scaled_object] if children.scaled_object else []
    objects = [*children.all(), *children.routing.provider_objects, *scaled]
    found = reach_objects(tp, objects, settings, spec, access.generates_secret(tp))
    return sorted({i.key: i for i in [*found, *trace_collectors(tp, settings)]}.values())


def trace_collectors(tp: TritonPipeline, settings: Settings) -> list[Reach]:
    """The OpenTelemetry collector URLs the author wrote (spec.server.tracing.url, an `opentelemetry,url=`
    in spec.server.args): the Triton pods send spans there from the cluster's network, which an author
    who may create Deployments in the namespace could do anyway (a pod of their own), and an admin list
    may allow for the others (issue 54, as a KEDA trigger's address)."""
    namespace = tp.metadata.namespace or "default"
    found: list[tuple[str, str]] = []
    url = tracing.collector(tp.spec.server.tracing)
    if url is not None:
        found.append(("spec.server.tracing.url", url))
    args = tp.spec.server.args
    flags, _ = tritonserver_options.parse(args)
    for flag in flags:
        if flag.option != "trace-config":
            continue
        parts = tritonserver_options.setting_parts(flag.option, flag.value or "")
        if parts is not None:
            mode, setting, value = parts
            if (mode or "").lower() == "opentelemetry" and setting == "url":
                index = flag.index + (0 if "=" in args[flag.index] else 1)  # `--trace-config X`: X's item
                found.append((f"spec.server.args[{index}]", value))
    group, resource = _group(DEPLOYMENT_API[0]), plural(DEPLOYMENT_API[1])
    return [
        Reach(
            field,
            "create",
            group,
            resource,
            namespace,
            detail=f"trace collector {url}",
            listed=listed(settings.allowed_trace_collectors, namespace, url),
            setting="allowed_trace_collectors",
        )
        for field, url in found
    ]


def optional_reach(
    tp: TritonPipeline, settings: Settings, spec: Mapping[str, Any], required: Sequence[Reach]
) -> list[Reach]:
    """The items of what the operator may render instead of what `required` holds (the ScaledObject of
    an `auto` autoscaling engine: render/autoscaling_objects.py), beyond those of `required`, marked
    optional."""
    scaled = (
        autoscaling_objects.scaled_object(tp, settings, "keda")
        if autoscaling_objects.may_choose_keda(tp)
        else None
    )
    if scaled is None:
        return []
    keys = {i.key for i in required}
    found = reach_objects(tp, [scaled], settings, spec)
    return [replace(i, optional=True) for i in found if i.key not in keys]


def reach_objects(
    tp: TritonPipeline,
    objects: Sequence[Mapping[str, Any]],
    settings: Settings,
    spec: Mapping[str, Any],
    secret: bool = False,
) -> list[Reach]:
    """Every item `objects` reach (and the generated admin-key Secret with `secret`), each once, sorted."""
    namespace = tp.metadata.namespace or "default"
    found: dict[str, Reach] = {}
    where = locations(spec)

    def add(item: Reach) -> None:
        found.setdefault(item.key, item)

    if secret:
        add(_kind("v1", "Secret", namespace, settings))
    for obj in objects:
        api, kind = str(obj["apiVersion"]), str(obj["kind"])
        item = _kind(api, kind, namespace, settings)
        add(item)
        for what, value, setting in _details(obj):
            at = where.get(value)
            if at is not None:
                allowed = listed(getattr(settings, setting), namespace, value)
                add(_detail(item, at, f"{what} {value}", allowed, setting))
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec")
        references = list(_pod_references(pod)) if kind == "Deployment" and pod else []
        references += [
            ("Secret", str(t.get("secretName", ""))) for t in (obj.get("spec") or {}).get("tls") or []
        ]
        for ref_kind, name in references:
            at = where.get(name) if name else None
            if at is not None:
                add(Reach(at, "get", "", plural(ref_kind), namespace, name, setting=""))
        for parent in (obj.get("spec") or {}).get("parentRefs") or []:
            other = parent.get("namespace")
            if other and other != namespace:
                at = where.get(str(other)) or "spec.routing.gateway.namespace"
                shared = other in settings.shared_gateway_namespaces
                name = str(parent.get("name", ""))
                add(
                    Reach(
                        at,
                        "get",
                        _group(GATEWAY_API[0]),
                        "gateways",
                        other,
                        name,
                        "",
                        shared,
                        "shared_gateway_namespaces",
                    )
                )
    return sorted(found.values())


def _kind(api_version: str, kind: str, namespace: str, settings: Settings) -> Reach:
    field = KIND_FIELDS.get(kind, "spec")
    trusted = kind in settings.trusted_kinds
    return Reach(field, "create", _group(api_version), plural(kind), namespace, listed=trusted)


def _detail(kind: Reach, field: str, detail: str, allowed: bool, setting: str) -> Reach:
    return Reach(field, kind.verb, kind.group, kind.resource, kind.namespace, "", detail, allowed, setting)


# ---------------------------------------------------------------------------------------- record


def _mac(key: bytes, namespace: str, name: str, by: str, keys: Sequence[str]) -> str:
    text = json.dumps([namespace, name, by, sorted(keys)], separators=(",", ":"))
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def record(key: bytes, namespace: str, name: str, by: str, keys: Sequence[str]) -> str:
    """The annotation's text: who was reviewed, the items they may reach, and the signature binding
    both to this pipeline's namespace and name."""
    doc = {"by": by, "reach": sorted(set(keys)), "mac": _mac(key, namespace, name, by, sorted(set(keys)))}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def recorded(key: bytes, namespace: str, name: str, text: str | None) -> frozenset[str]:
    """The items a record allows: none when there is no record, it does not read, or its signature is
    not the operator's for this pipeline (written by hand, copied from another)."""
    if not text:
        return frozenset()
    try:
        doc = json.loads(text)
        by, keys, mac = str(doc["by"]), [str(k) for k in doc["reach"]], str(doc["mac"])
    except (ValueError, KeyError, TypeError):
        return frozenset()
    if not hmac.compare_digest(mac, _mac(key, namespace, name, by, keys)):
        return frozenset()
    return frozenset(keys)


def record_of(obj: Mapping[str, Any]) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(RECORD_ANNOTATION)
    return str(value) if value is not None else None


def unreviewed(items: Sequence[Reach], allowed: frozenset[str], webhook: bool = True) -> list[Problem]:
    """The refusals of the items neither listed nor on the record (`allowed`), at their fields."""
    message = NOT_RECORDED if webhook else NO_WEBHOOK
    return [
        Problem(
            item.field,
            message.format(words=item.words(), annotation=RECORD_ANNOTATION, allow=allowed_by(item)),
        )
        for item in items
        if not item.listed and item.key not in allowed
    ]


CHART_VALUES = {  # each admin list as the chart names it
    "trusted_kinds": "security.trustedKinds",
    "allowed_hosts": "security.allowedHosts",
    "allowed_ingress_classes": "security.allowedIngressClasses",
    "allowed_metrics_addresses": "security.allowedMetricsAddresses",
    "allowed_trace_collectors": "security.allowedTraceCollectors",
    "shared_gateway_namespaces": "security.sharedGatewayNamespaces",
}


def allowed_by(item: Reach) -> str:
    """What else could allow an item: the admin list, or nothing but the author's own access."""
    value = CHART_VALUES.get(item.setting)
    return LISTED_BY.format(setting=value) if value else NOT_LISTABLE
