"""The admission webhook's settings and the configurations rendered from them (pure).

`WebhookSettings` (the TRITONPIPELINE_WEBHOOK_* variables) says where the webhook listens, how the API
server reaches it (a Service or a URL) and how it answers when unreachable; `configuration` and
`mutating_configuration` render the ValidatingWebhookConfiguration and the access review's
MutatingWebhookConfiguration the operator applies (runtime/webhook_server.py `Server.register`).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..settings import (
    BAD_VALUE,
    FIELD_MANAGER,
    GROUP,
    PLURAL,
    VERSION,
    Range,
    env_name,
    read_env,
    setting,
)
from ..spec import DNS_SUBDOMAIN_RE
from ..triton.addresses import url_host
from .meta import NAMESPACE_NAME

HANDLER_ID = "validate"  # kopf's handler id: the webhook serves it at PATH
PATH = f"/{HANDLER_ID}"
WEBHOOK_NAME = f"pipelines.{GROUP}"  # the webhook's name in its configuration (kubectl prints it)
REVIEW_HANDLER_ID = "review-access"  # the access review's kopf handler (reconcile/authors.py)
REVIEW_PATH = f"/{REVIEW_HANDLER_ID}"
REVIEW_WEBHOOK_NAME = f"authors.{GROUP}"  # the access review's name in the mutating configuration
FAILURE_POLICIES = ("Ignore", "Fail")
MAX_TIMEOUT_SECONDS = 30  # the API's limit for timeoutSeconds
CERT_SECONDS = 365 * 24 * 3600  # validity of the self-signed CA and serving certificate
FILE_CHECK_SECONDS = 10.0  # how often the certificate files of WEBHOOK_CERT_DIR are read for a renewal
_LISTEN_RE = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\s/]*):(?P<port>\d{1,5})$")
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"  # a DNS-1123 label: a namespace or a Service name
_SERVICE_RE = re.compile(rf"^(?P<namespace>{_LABEL})/(?P<name>{_LABEL}):(?P<port>\d{{1,5}})$")


class WebhookConfigError(ValueError):
    """A webhook setting (environment variable) that cannot work; the message names it."""


@dataclass(frozen=True)
class WebhookSettings:
    """Where and how the webhook is served and registered (TRITONPIPELINE_WEBHOOK_* variables)."""

    listen: str = setting(
        "",
        "WEBHOOK_LISTEN",
        "`HOST:PORT` to serve the admission webhook on (HTTPS); empty: no webhook (the operator reports "
        "problems in status only).",
    )
    configuration: str = setting(
        FIELD_MANAGER,
        "WEBHOOK_CONFIGURATION",
        "Name of the ValidatingWebhookConfiguration the operator keeps up to date.",
    )
    service: str = setting(
        "",
        "WEBHOOK_SERVICE",
        "`NAMESPACE/NAME:PORT` of the Service in front of the webhook; empty: the API server calls "
        "`https://HOST:PORT/validate`.",
    )
    host: str = setting(
        "",
        "WEBHOOK_HOST",
        "Host of that URL when there is no Service; empty: the listen host.",
    )
    cert_dir: str = setting(
        "",
        "WEBHOOK_CERT_DIR",
        "Directory holding `tls.crt` and `tls.key` (e.g. cert-manager's Secret, reloaded when they "
        "change); empty: a self-signed certificate.",
    )
    shared_cert: str = setting(
        "",
        "WEBHOOK_SHARED_CERT",
        "`NAMESPACE/NAME` of the Secret the replicas share the self-signed certificate in (created and "
        "renewed by whichever replica finds it missing or due); empty: this process keeps its own.",
    )
    failure_policy: str = setting(
        "Fail",
        "WEBHOOK_FAILURE_POLICY",
        "What the API server does when it cannot reach the webhook or gets no answer from it: `Fail` "
        "(refuse the write) or `Ignore` (store it unchecked; the operator reports in status).",
    )
    timeout_seconds: int = setting(
        10,
        "WEBHOOK_TIMEOUT_SECONDS",
        "Seconds the API server waits for the webhook.",
        Range(1, MAX_TIMEOUT_SECONDS, whole=True),
    )
    cert_seconds: int = setting(
        CERT_SECONDS,
        "WEBHOOK_CERT_SECONDS",
        "Validity of the self-signed CA and certificate in seconds (replaced after two thirds of it, and "
        "at start).",
        Range(3 * FILE_CHECK_SECONDS, whole=True),
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        ws = cls(**read_env(cls, os.environ if env is None else env, WebhookConfigError))
        ws.check()
        return ws

    @property
    def enabled(self) -> bool:
        return bool(self.listen)

    def check(self) -> None:
        """Raise WebhookConfigError naming the first setting that cannot work."""
        if self.failure_policy not in FAILURE_POLICIES:
            raise self._bad("failure_policy", "expected Ignore or Fail")
        if not self.enabled:
            return
        if len(self.configuration) > 253 or not DNS_SUBDOMAIN_RE.fullmatch(self.configuration):
            raise self._bad(
                "configuration", "expected a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"
            )
        if not _LISTEN_RE.match(self.listen) or not 0 < self.port < 65536:
            raise self._bad("listen", "expected HOST:PORT, e.g. 0.0.0.0:9443")
        service = _SERVICE_RE.match(self.service)
        if self.service and (service is None or not 0 < int(service["port"]) < 65536):
            raise self._bad("service", "expected NAMESPACE/NAME:PORT")
        namespace, _, secret = self.shared_cert.partition("/")
        if self.shared_cert and not (re.fullmatch(_LABEL, namespace) and DNS_SUBDOMAIN_RE.fullmatch(secret)):
            raise self._bad("shared_cert", "expected NAMESPACE/NAME of a Secret")
        if self.cert_dir:
            missing = [f for f in ("tls.crt", "tls.key") if not (Path(self.cert_dir) / f).is_file()]
            if missing:
                raise self._bad("cert_dir", f"{' and '.join(missing)} missing")

    def _bad(self, name: str, why: str) -> WebhookConfigError:
        """The error for field `name`: its variable, its value and `why`."""
        return WebhookConfigError(
            BAD_VALUE.format(env=env_name(type(self), name), text=getattr(self, name), why=why)
        )

    @property
    def listen_host(self) -> str:
        host = _LISTEN_RE.match(self.listen)["host"]  # type: ignore[index]
        return host.strip("[]")

    @property
    def port(self) -> int:
        return int(_LISTEN_RE.match(self.listen)["port"])  # type: ignore[index]

    def server_names(self) -> list[str]:
        """The names the apiserver may use for the webhook: the Service's DNS names, or the URL's host."""
        if self.service:
            m = _SERVICE_RE.match(self.service)
            assert m is not None
            name, ns = m["name"], m["namespace"]
            return [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]
        return [self.url_host()]

    def url_host(self) -> str:
        host = self.host or self.listen_host
        return "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host


def client_config(ws: WebhookSettings, ca_bundle: bytes | None, at: str = PATH) -> dict[str, Any]:
    """How the apiserver reaches the webhook: through the Service, or at https://HOST:PORT/validate
    (`at`: the path, one per kopf handler)."""
    if ws.service:
        m = _SERVICE_RE.match(ws.service)
        assert m is not None
        config: dict[str, Any] = {
            "service": {"namespace": m["namespace"], "name": m["name"], "port": int(m["port"]), "path": at}
        }
    else:
        config = {"url": f"https://{url_host(ws.url_host())}:{ws.port}{at}"}
    if ca_bundle is not None:
        config["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
    return config


def configuration(
    ws: WebhookSettings, namespaces: Sequence[str], ca_bundle: bytes | None, own_namespace: str = ""
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration: TritonPipeline CREATE and UPDATE, in the watched namespaces
    but the operator's own (`own_namespace`: the operator's pods there never wait on their own webhook,
    whatever its failure policy). Without `ca_bundle` the caBundle field is left to its owner
    (cert-manager's CA injector)."""
    hook: dict[str, Any] = {
        "name": WEBHOOK_NAME,
        "clientConfig": client_config(ws, ca_bundle),
        "rules": [
            {
                "apiGroups": [GROUP],
                "apiVersions": [VERSION],
                "resources": [PLURAL],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": ws.failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": ws.timeout_seconds,
        "admissionReviewVersions": ["v1"],
    }
    expressions = []
    if namespaces:
        expressions.append({"key": NAMESPACE_NAME, "operator": "In", "values": sorted(namespaces)})
    if own_namespace:
        expressions.append({"key": NAMESPACE_NAME, "operator": "NotIn", "values": [own_namespace]})
    if expressions:
        hook["namespaceSelector"] = {"matchExpressions": expressions}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": ws.configuration},
        "webhooks": [hook],
    }


def mutating_configuration(
    ws: WebhookSettings, namespaces: Sequence[str], ca_bundle: bytes | None, own_namespace: str = ""
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration of the access review (reconcile/authors.py): the same requests,
    scope and policies as `configuration`, served at REVIEW_PATH; it records who may reach what on the
    object (it runs once: what later webhooks change is not its concern)."""
    validating = configuration(ws, namespaces, ca_bundle, own_namespace)
    hook = {
        **validating["webhooks"][0],
        "name": REVIEW_WEBHOOK_NAME,
        "clientConfig": client_config(ws, ca_bundle, REVIEW_PATH),
        "reinvocationPolicy": "Never",
    }
    return {**validating, "kind": "MutatingWebhookConfiguration", "webhooks": [hook]}
