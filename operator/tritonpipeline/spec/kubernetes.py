"""What Kubernetes refuses of the fields the spec passes through to the objects it renders (pure): a
container's resources, the Deployment's strategy, tolerations, the security contexts' user and group
ids, the affinity's kinds, NetworkPolicy peers. Found by `validate`, the webhook and the operator before
anything is applied, in the apiserver's terms, instead of by the apiserver when the operator applies the
Deployment (a resources `cpu: lots` passed `validate` and the CRD, and the Deployment was refused). Each
check returns (sub-path, message) pairs for base.FieldProblems."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import kind_of, quote
from .base import LABEL_NAME_RE, LABEL_VALUE_RE, RULE_TEXT, FieldProblems

Found = list[tuple[str, str]]

# apimachinery's resource.Quantity, as the OpenAPI document states it (a sign, a decimal number, then a
# binary or decimal suffix or an exponent)
K8S_QUANTITY_RE = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?(\d+(\.\d*)?|\.\d+))?$"
)
QUANTITY = "invalid quantity {value}: a Kubernetes quantity such as 500m, 2, 1.5Gi or 4G, not negative"
RESOURCE_FIELDS = ("requests", "limits", "claims")
STRATEGY_TYPES = ("RollingUpdate", "Recreate")
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
ID_FIELDS = ("runAsUser", "runAsGroup", "fsGroup")
MAX_ID = 2147483647
PERCENT_RE = re.compile(r"^[0-9]+%$")

# An image reference as the container runtimes parse it (the distribution project's reference grammar:
# [HOST[:PORT]/]PATH[:TAG][@DIGEST], the path in lowercase components joined by . _ __ or dashes, a
# digest the runtimes can check). The apiserver takes any string without surrounding blanks; the
# kubelet then reports InvalidImageName.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
# the parts as patterns: the chart's values.schema.json states the same ones (tests/unit/test_chart.py)
IMAGE_REPOSITORY = rf"(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
IMAGE_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_DIGEST = r"sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128}"
IMAGE_REFERENCE = rf"{IMAGE_REPOSITORY}(?::{IMAGE_TAG})?(?:@(?:{IMAGE_DIGEST}))?"
IMAGE_REFERENCE_RE = re.compile(rf"^{IMAGE_REFERENCE}$")
MAX_IMAGE_PATH = 255  # the grammar's limit on the path (the name after the host, library/ included)
DOCKER_HUB_LIBRARY = "library/"  # where the runtimes look for a one-component name on Docker Hub
IMAGE = (
    "invalid image reference {value}: expected [REGISTRY[:PORT]/]NAME[:TAG][@DIGEST], the name in lowercase "
    "letters, digits and '.', '_' or '-' between them, a digest sha256:<64 hex digits> "
    "(e.g. nvcr.io/nvidia/tritonserver:26.08-py3)"
)


@dataclass(frozen=True)
class KubernetesType:
    """A pass-through field's metadata: the Kubernetes type it holds (such as `Affinity`, core/v1's).
    The CRD gives the field that type's own schema (render/crd.py), so the API server bounds it (no
    unknown field, no nesting the type has not) before the webhook or the operator reads it."""

    name: str


def passed_through(value: Any, check: Callable[[Any], Found]) -> Any:
    """`value`, for a field validator, where `check` finds nothing; else the FieldProblems it found."""
    found = check(value)
    if found:
        raise FieldProblems(found)
    return value


def _unknown(value: Mapping[str, Any], known: Sequence[str], what: str) -> Found:
    return [
        (f".{key}", f"unknown field {key!r} of {what}; expected one of: {', '.join(known)}")
        for key in value
        if key not in known
    ]


def _quantity(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value >= 0
    return isinstance(value, str) and not value.startswith("-") and bool(K8S_QUANTITY_RE.fullmatch(value))


def resources(value: Mapping[str, Any]) -> Found:
    """A container's `resources`: requests and limits map resource names to quantities, claims name
    claims."""
    found = _unknown(value, RESOURCE_FIELDS, "a container's resources")
    for key in ("requests", "limits"):
        entries = value.get(key)
        if entries is None:
            continue
        if not isinstance(entries, dict):
            found.append(
                (f".{key}", f"expected a mapping of resource name to quantity, got {kind_of(entries)}")
            )
            continue
        for name, amount in entries.items():
            if not LABEL_NAME_RE.fullmatch(str(name)):  # a qualified name, as a label key
                found.append(
                    (
                        f".{key}.{name}",
                        f"invalid resource name {name!r}, such as cpu, memory or nvidia.com/gpu",
                    )
                )
            elif not _quantity(amount):
                found.append((f".{key}.{name}", QUANTITY.format(value=quote(amount))))
    claims = value.get("claims")
    if claims is not None and not (
        isinstance(claims, list)
        and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in claims)
    ):
        found.append((".claims", "expected a list of {name: CLAIM} (the pod's resourceClaims)"))
    return found


def strategy(value: Mapping[str, Any]) -> Found:
    """A Deployment's `strategy`: its type, and a rollingUpdate's maxSurge and maxUnavailable only with
    RollingUpdate, a count or a percentage, not both 0."""
    found = _unknown(value, ("type", "rollingUpdate"), "a Deployment's strategy")
    kind = value.get("type", "RollingUpdate")
    if kind not in STRATEGY_TYPES:
        found.append((".type", f"expected one of {', '.join(STRATEGY_TYPES)}, got {quote(kind)}"))
    rolling = value.get("rollingUpdate")
    if rolling is None:
        return found
    if kind == "Recreate":
        return [*found, (".rollingUpdate", "may not be set when type is Recreate (Kubernetes refuses it)")]
    if not isinstance(rolling, dict):
        return [*found, (".rollingUpdate", f"expected a mapping, got {kind_of(rolling)}")]
    found += [
        (f".rollingUpdate{p}", m)
        for p, m in _unknown(rolling, ("maxSurge", "maxUnavailable"), "rollingUpdate")
    ]
    counts = {}
    for key in ("maxSurge", "maxUnavailable"):
        given = rolling.get(key)
        if given is None:
            continue
        is_count = isinstance(given, int) and not isinstance(given, bool) and given >= 0
        if not is_count and not (isinstance(given, str) and PERCENT_RE.fullmatch(given)):
            message = f"expected a number of pods or a percentage such as 25%, got {quote(given)}"
            found.append((f".rollingUpdate.{key}", message))
        counts[key] = str(given).rstrip("%")
    if counts.get("maxSurge") == counts.get("maxUnavailable") == "0":
        found.append(
            (".rollingUpdate.maxUnavailable", "may not be 0 when maxSurge is 0 (Kubernetes refuses it)")
        )
    return found


def tolerations(value: Sequence[Mapping[str, Any]]) -> Found:
    """Pod tolerations: known fields, operator Exists or Equal (Exists without a value, an empty key only
    with Exists), a known effect, tolerationSeconds only with NoExecute."""
    found: Found = []
    for i, t in enumerate(value):
        at = f"[{i}]"
        found += [(at + p, m) for p, m in _unknown(t, TOLERATION_FIELDS, "a toleration")]
        operator, effect = t.get("operator", "Equal"), t.get("effect", "")
        if operator not in TOLERATION_OPERATORS:
            found.append(
                (
                    f"{at}.operator",
                    f"expected one of {', '.join(TOLERATION_OPERATORS)}, got {quote(operator)}",
                )
            )
        elif operator == "Exists" and t.get("value"):
            found.append((f"{at}.value", "must be empty when operator is Exists"))
        elif operator == "Equal" and not t.get("key"):
            found.append((f"{at}.operator", "must be Exists when key is empty"))
        if effect not in ("", *TOLERATION_EFFECTS):
            found.append(
                (f"{at}.effect", f"expected one of {', '.join(TOLERATION_EFFECTS)}, got {quote(effect)}")
            )
        seconds = t.get("tolerationSeconds")
        if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
            found.append((f"{at}.tolerationSeconds", f"expected an integer, got {quote(seconds)}"))
        elif seconds is not None and effect != "NoExecute":
            found.append((f"{at}.effect", "must be NoExecute when tolerationSeconds is set"))
    return found


def affinity(value: Mapping[str, Any]) -> Found:
    """A pod's affinity: nodeAffinity, podAffinity and podAntiAffinity, each a mapping."""
    known = ("nodeAffinity", "podAffinity", "podAntiAffinity")
    found = _unknown(value, known, "a pod's affinity")
    return found + [
        (f".{key}", f"expected a mapping, got {kind_of(value[key])}")
        for key in known
        if key in value and not isinstance(value[key], dict)
    ]


def ids(value: Mapping[str, Any]) -> Found:
    """A security context's user and group ids: integers from 0 to 2147483647."""
    found: Found = []
    for key in (*ID_FIELDS, "supplementalGroups"):
        given = value.get(key)
        items = given if key == "supplementalGroups" and isinstance(given, list) else [given]
        for k, item in enumerate(items):
            if item is None:
                continue
            at = f".{key}" + (f"[{k}]" if key == "supplementalGroups" else "")
            if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item <= MAX_ID:
                found.append((at, f"must be an integer between 0 and {MAX_ID}, got {quote(item)}"))
    return found


def peers(value: Sequence[Any]) -> Found:
    """NetworkPolicy peers: mappings of podSelector, namespaceSelector (mappings) or ipBlock (a CIDR, and
    CIDRs inside it under except)."""
    found: Found = []
    for i, peer in enumerate(value):
        at = f"[{i}]"
        if not isinstance(peer, dict):
            found.append(
                (at, f"expected a mapping (podSelector, namespaceSelector or ipBlock), got {kind_of(peer)}")
            )
            continue
        found += [
            (at + p, m) for p, m in _unknown(peer, ("podSelector", "namespaceSelector", "ipBlock"), "a peer")
        ]
        for key in ("podSelector", "namespaceSelector", "ipBlock"):
            if key in peer and not isinstance(peer[key], dict):
                found.append((f"{at}.{key}", f"expected a mapping, got {kind_of(peer[key])}"))
        block = peer.get("ipBlock")
        if isinstance(block, dict):
            found += [(f"{at}.ipBlock{p}", m) for p, m in _cidrs(block)]
    return found


def _cidrs(block: Mapping[str, Any]) -> Found:
    found = [(p, m) for p, m in _unknown(block, ("cidr", "except"), "an ipBlock")]
    given = [(".cidr", block.get("cidr"))]
    given += [(f".except[{k}]", c) for k, c in enumerate(block.get("except") or [])]
    for at, cidr in given:
        try:
            ipaddress.ip_network(str(cidr), strict=False)
            if not isinstance(cidr, str) or "/" not in cidr:
                raise ValueError
        except ValueError:
            found.append((at, f"invalid CIDR {quote(cidr)}, such as 10.0.0.0/8 or 2001:db8::/32"))
    return found


def image_host(value: str) -> tuple[str | None, str]:
    """An image reference split as the runtimes split it: (its registry host, or None for Docker Hub;
    the rest). The first component is a host when it has a dot or a port, is localhost, or has an
    upper-case letter (a path component cannot: `Mirror/x` is pulled from the host Mirror)."""
    first, slash, rest = value.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first, rest
    return None, value


def image(value: str) -> Found:
    """A container image reference the runtime can parse (the kubelet's InvalidImageName otherwise)."""
    host, rest = image_host(value)
    path = re.split(r"@|:", rest, maxsplit=1)[0]
    if host is None and "/" not in path:
        path = DOCKER_HUB_LIBRARY + path
    if IMAGE_REFERENCE_RE.fullmatch(value) and len(path) <= MAX_IMAGE_PATH:
        return []
    return [("", IMAGE.format(value=quote(value)))]


def labels(value: Mapping[str, str]) -> Found:
    """Label keys (qualified names) and values (63 characters of [-A-Za-z0-9_.], alphanumeric ends)."""
    return [
        (f".{key}", f"invalid {what} {quote(text)}: {RULE_TEXT[what]}")
        for key, val in value.items()
        for what, text, pattern in (("label key", key, LABEL_NAME_RE), ("label value", val, LABEL_VALUE_RE))
        if not pattern.fullmatch(text)
    ]


MAX_ANNOTATIONS_BYTES = 256 * 1024  # apimachinery's TotalAnnotationSizeLimitB: keys and values together
ANNOTATIONS_TOO_LARGE = "annotations take {size} bytes, keys and values together; Kubernetes allows {limit}"


def annotation_map(value: Mapping[str, str]) -> Found:
    """Annotation keys (qualified names, as label keys) and their total size."""
    found: Found = [
        (f".{key}", f"invalid annotation key {quote(key)}: {RULE_TEXT['label key']}")
        for key in value
        if not LABEL_NAME_RE.fullmatch(key)
    ]
    size = sum(len(k.encode()) + len(v.encode()) for k, v in value.items())
    if size > MAX_ANNOTATIONS_BYTES:
        found.append(("", ANNOTATIONS_TOO_LARGE.format(size=size, limit=MAX_ANNOTATIONS_BYTES)))
    return found
