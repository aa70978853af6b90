"""The validating admission webhook: the whole compiler at `kubectl apply` (served with kopf).

`review` is pure: the same parse + compile + cluster checks as `tritonpipeline validate` and the operator
(render/checks.py `check`), for a CREATE or an UPDATE that changes the spec. `configuration` renders the
ValidatingWebhookConfiguration; `Server` is the kopf webhook server with its certificate (self-signed, or
files such as cert-manager's) that registers that configuration once it listens. Replicas of the operator
share the self-signed certificate through a Secret (`SecretStore`): each serves it, and the configuration
trusts every CA in it that has not expired, so no replica's registration undoes another's.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import logging
import os
import re
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import kopf
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..errors import Problem
from ..kube.api_client import Kube, KubeError, path
from ..render import ownership
from ..render.checks import Verdict
from ..render.meta import NAMESPACE_NAME
from ..settings import (
    API_VERSION,
    BAD_VALUE,
    FIELD_MANAGER,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Range,
    Settings,
    env_name,
    read_env,
    setting,
)
from ..spec import DNS_SUBDOMAIN_RE
from ..triton.addresses import url_host
from . import log_events as events
from .compiling import Workers
from .fairness import FairShare
from .loops import FIRST_RETRY_SECONDS, WEBHOOK_CERTIFICATE, Loops, describe, retrying, supervise

log = logging.getLogger(__name__)

HANDLER_ID = "validate"  # kopf's handler id: the webhook serves it at PATH
PATH = f"/{HANDLER_ID}"
WEBHOOK_NAME = f"pipelines.{GROUP}"  # the webhook's name in its configuration (kubectl prints it)
REVIEW_HANDLER_ID = "review-access"  # the access review's kopf handler (reconcile/authors.py)
REVIEW_PATH = f"/{REVIEW_HANDLER_ID}"
REVIEW_WEBHOOK_NAME = f"authors.{GROUP}"  # the access review's name in the mutating configuration
NOT_REGISTERED = "the admission webhook is not registered yet"  # why the operator is not ready before
FAILURE_POLICIES = ("Ignore", "Fail")
MAX_TIMEOUT_SECONDS = 30  # the API's limit for timeoutSeconds
CERT_SECONDS = 365 * 24 * 3600  # validity of the self-signed CA and serving certificate
RENEW_AT = 2 / 3  # a new CA and certificate replace them after this part of their validity
FILE_CHECK_SECONDS = 10.0  # how often the certificate files of WEBHOOK_CERT_DIR are read for a renewal
KOPF_FILE_CHECK_SECONDS = 3600.0  # kopf's check of its (unchanging) copy: rare, it finds nothing
STORE_CHECK_SECONDS = 30.0  # how often a replica reads the shared certificate (at most a sixth of its life)
BACKDATE = datetime.timedelta(minutes=5)  # certificates start this early (clocks that run behind)
REGISTER_RETRY_SECONDS = 10.0  # the longest wait before the registration or the first certificate is retried
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


# ------------------------------------------------------------------------------------------ review


def review(operation: str, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> bool:
    """Whether an admission request is one the webhook checks: a CREATE, or an UPDATE that changes the spec
    of an object not being deleted. Other updates (labels, kopf's annotations, finalizers) pass, so an
    object stored before the webhook existed keeps working and reports its problems in status."""
    if new is None or operation not in ("CREATE", "UPDATE"):
        return False
    if (new.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return not (operation == "UPDATE" and old is not None and old.get("spec") == new.get("spec"))


def names_taken(kube: Kube, doc: Mapping[str, Any], keda: bool = True) -> list[Problem]:
    """A new pipeline's object names that are already another's, where the webhook can know it: another
    pipeline of the namespace that makes an object of the same kind and name (render/ownership.py
    `collisions`), an existing object of a name the pipeline would make that it could not take (a Secret
    is not read: the operator may only create Secrets; nor a ScaledObject without `keda`, settings.use_keda:
    the operator makes none, and the chart grants it none). What cannot be read (403) is not checked."""
    meta = doc.get("metadata") or {}
    name, namespace, uid = str(meta.get("name", "")), meta.get("namespace") or "default", meta.get("uid", "")
    problems = []
    candidates = ownership.could_collide(name)
    try:
        if candidates is None:
            others = [str(p["metadata"]["name"]) for p in kube.list(API_VERSION, KIND, namespace, "", True)]
        else:  # a GET of each pipeline that could collide, not a list of them all (their managedFields)
            others = [other for other in candidates if kube.get(API_VERSION, KIND, namespace, other)]
    except KubeError:
        others = []
    for other, kind, taken in ownership.collisions(name, others):
        message = ownership.NAME_COLLISION.format(other=other, kind=kind, name=taken)
        problems.append(Problem("metadata.name", message))
    for api, kind, taken in ownership.generated_names(name):
        if kind == "Secret" or (kind == "ScaledObject" and not keda):
            continue
        try:
            live = kube.get(api, kind, namespace, taken)
        except KubeError:
            continue  # not served by this cluster, or not ours to read
        if live is None or ownership.holder(live, name, str(uid)).writable:
            continue
        message = ownership.NAME_TAKEN_AT_ADMISSION.format(
            kind=kind,
            name=taken,
            owner=ownership.describe_owner(live),
            annotation=ownership.ADOPT_ANNOTATION,
            pipeline=name,
        )
        problems.append(Problem("metadata.name", message))
    return problems


# A review's API reads run in threads of their own: the reconciles' API calls (the default executor) may
# queue for minutes while many large pipelines resync, and the API server waits at most 10 s for an
# answer. Its compile runs in the compile workers (runtime/compiling.py).
REVIEW_THREADS = 2
REVIEWS = ThreadPoolExecutor(REVIEW_THREADS, thread_name_prefix="review")
# the review threads shared fairly between namespaces, one at a time for each: a tenant's storm of
# (dry-run) creates leaves a thread free for another namespace's review, which waits for none of the
# storm's reads (issue 54: three large specs stalled another tenant's admission 3.2 s at a time; with
# both threads open to one namespace, a storm at one large dry run a second still held them)
TURNS = FairShare(REVIEW_THREADS, 1)
IN_PROCESS = Workers()  # compiles in threads of this process: callers that pass no workers (tests)


async def admit(
    operation: str,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    warnings: list[str],
    settings: Settings | None,
    kube: Kube | None = None,
    workers: Workers = IN_PROCESS,
) -> None:
    """kopf's validating handler: raises kopf.AdmissionError (HTTP 422) with every problem, adds warnings.
    The verdict comes from `workers` (its cache, or a compile in a worker process). A CREATE whose
    objects' names are another's is refused too (`names_taken`, with `kube`). An unexpected error allows
    the request with a warning: the operator still checks it afterwards."""
    if not review(operation, new, old):
        return
    assert new is not None
    try:
        loop = asyncio.get_running_loop()
        result = await workers.verdict(new, settings)
        if result.allowed and operation == "CREATE" and kube is not None:
            async with TURNS.of(str((new.get("metadata") or {}).get("namespace", ""))):
                keda = settings is None or settings.use_keda
                taken = await loop.run_in_executor(REVIEWS, names_taken, kube, new, keda)
            result = Verdict(taken, result.warnings) if taken else result
    except Exception as exc:
        events.WEBHOOK_REVIEW_FAILED.log(log)
        warnings.append(f"not checked at admission ({type(exc).__name__}); the operator reports in status")
        return
    warnings.extend(map(str, result.warnings))
    if not result.allowed:
        raise kopf.AdmissionError(result.message(), code=422)


# ------------------------------------------------------------------------------- registration


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


# -------------------------------------------------------------------------------- certificates


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def self_signed(names: Sequence[str], seconds: int = CERT_SECONDS) -> tuple[bytes, bytes, bytes]:
    """A new CA and a serving certificate it signs for `names` (DNS names or IP addresses):
    (CA certificate, serving certificate, serving key), PEM. Nothing is written anywhere; the CA's key is
    dropped (a CA signs one certificate)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - BACKDATE, now + datetime.timedelta(seconds=seconds)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tritonpipeline webhook CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in dict.fromkeys(names)]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), leaf.public_bytes(pem), key_pem


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass(frozen=True)
class Certs:
    """What the webhook serves (`cert`, `key`) and what the API server trusts (`ca_bundle`: every CA that
    has not expired, the one that signed `cert` last), PEM."""

    ca_bundle: bytes
    cert: bytes
    key: bytes


def new_certs(previous: Certs | None, names: Sequence[str], seconds: int, now: datetime.datetime) -> Certs:
    """A new CA and certificate; the CAs of `previous` that have not expired stay trusted, so a replica
    still serving the previous certificate is reached until it switches."""
    ca, cert, key = self_signed(names, seconds)
    kept = previous.ca_bundle if previous is not None else b""
    return Certs(_unexpired(kept, now) + ca, cert, key)


def due(certs: Certs, names: Sequence[str], now: datetime.datetime) -> str:
    """Why `certs` must be replaced (a new CA and certificate): "" when they serve on. Renewal comes after
    RENEW_AT of the certificate's life."""
    try:
        leaf = x509.load_pem_x509_certificate(certs.cert)
        x509.load_pem_x509_certificates(certs.ca_bundle)
    except ValueError:
        return "the stored certificate cannot be read"
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the stored certificate names no host"
    served = {str(n.value) for n in sans}
    if served != set(names):
        wanted = sorted(set(names))
        return f"the stored certificate is for {sorted(served)}, the webhook is reached as {wanted}"
    start, end = leaf.not_valid_before_utc + BACKDATE, leaf.not_valid_after_utc
    if now >= start + (end - start) * RENEW_AT:
        return f"the certificate expires at {end.isoformat()}"
    return ""


def pruned(certs: Certs, now: datetime.datetime) -> Certs:
    """`certs` without the CAs that have expired (no certificate they signed is valid any more)."""
    return Certs(_unexpired(certs.ca_bundle, now), certs.cert, certs.key)


def _unexpired(bundle: bytes, now: datetime.datetime) -> bytes:
    if not bundle:
        return b""
    pem = serialization.Encoding.PEM
    cas = x509.load_pem_x509_certificates(bundle)
    return b"".join(ca.public_bytes(pem) for ca in cas if ca.not_valid_after_utc > now)


def secret_data(certs: Certs) -> dict[str, str]:
    """The Secret's data: the keys of a kubernetes.io/tls Secret (ca.crt: what the API server trusts)."""
    files = {"ca.crt": certs.ca_bundle, "tls.crt": certs.cert, "tls.key": certs.key}
    return {k: base64.b64encode(v).decode("ascii") for k, v in files.items()}


def certs_of(secret: Mapping[str, Any]) -> Certs | None:
    """The certificates a Secret holds (secret_data's format); None when it holds none."""
    data = secret.get("data") or {}
    try:
        files = {k: base64.b64decode(data[k], validate=True) for k in ("ca.crt", "tls.crt", "tls.key")}
    except (KeyError, ValueError, TypeError):
        return None
    return Certs(files["ca.crt"], files["tls.crt"], files["tls.key"])


# -------------------------------------------------------------------------------------- server


class MemoryStore:
    """The self-signed certificate of a process that shares it with none (no Secret named)."""

    def __init__(self) -> None:
        self.certs: Certs | None = None
        self.version = 0

    def read(self) -> tuple[Certs | None, str]:
        return self.certs, str(self.version)

    def write(self, certs: Certs, version: str) -> bool:
        self.certs, self.version = certs, self.version + 1
        return True

    def __str__(self) -> str:
        return "this process"


class SecretStore:
    """The self-signed certificate every replica serves, in a Secret (the chart creates it empty: the
    operator may only read and update that one). A write replaces the data of the Secret as read, with its
    resourceVersion (a create when there was none): of two replicas renewing at once, one writes and the
    other reads what it wrote. The rest of the Secret (helm's labels and annotations) is kept."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.read_last: dict[str, Any] | None = None

    def read(self) -> tuple[Certs | None, str]:
        """Raises KubeError."""
        secret = self.kube.get("v1", "Secret", self.namespace, self.name)
        self.read_last = secret
        if secret is None:
            return None, ""
        return certs_of(secret), str(secret["metadata"].get("resourceVersion", ""))

    def write(self, certs: Certs, version: str) -> bool:
        """False when another replica wrote first (409). Raises KubeError."""
        last = self.read_last
        if version and last is not None and last["metadata"].get("resourceVersion") == version:
            doc = {**last, "data": secret_data(certs)}
            url = path("v1", "Secret", self.namespace, self.name)
            method = "PUT"
        else:
            meta = {"name": self.name, "namespace": self.namespace}
            doc = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": secret_data(certs)}
            url, method = path("v1", "Secret", self.namespace), "POST"
        try:
            self.kube.request(method, url, body=doc, retries=0)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def __str__(self) -> str:
        return f"Secret {self.namespace}/{self.name}"


# The largest AdmissionReview the webhook reads: an UPDATE carries the object and its old copy, each up to
# the API server's request limit (3 MiB). aiohttp's default, 1 MiB, answered a 260 KB pipeline's UPDATE
# review (with its managedFields) 413, which failurePolicy Fail turns into a refused write.
REVIEW_MAX_BYTES = 8 * 1024 * 1024


class ReviewServer(kopf.WebhookServer):
    """kopf's webhook server, reading reviews up to REVIEW_MAX_BYTES."""

    @staticmethod
    async def _serve(fn: kopf.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await kopf.WebhookServer._serve(fn, request.clone(client_max_size=REVIEW_MAX_BYTES))


class Server:
    """kopf's webhook server with this operator's certificate; registers the configuration (server-side
    apply, retried until it works) each time kopf (re)starts listening: at start, and after the
    certificate files changed (cert-manager renewed its Secret, or the self-signed one was renewed).
    """

    def __init__(
        self,
        ws: WebhookSettings,
        namespaces: Sequence[str],
        kube: Kube,
        loops: Loops,
        own_namespace: str = "",
        review: bool = False,
        registered: Callable[[], None] = lambda: None,
    ) -> None:
        self.ws = ws
        self.review = review  # register the access review's mutating configuration too
        self.registered = registered  # called after each registration (the operator is ready then)
        self.namespaces = tuple(namespaces)
        self.own_namespace = own_namespace
        self.kube = kube
        self.loops = loops  # the certificate's check is one of the operator's loops (loops.py)
        self.ca_bundle: bytes | None = None  # the self-signed CAs the API server is told to trust
        self.registering = asyncio.Lock()
        self.store: MemoryStore | SecretStore = MemoryStore()
        if ws.shared_cert:
            namespace, name = ws.shared_cert.split("/", 1)
            self.store = SecretStore(kube, namespace, name)

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        ws = self.ws
        workdir = Path(tempfile.mkdtemp(prefix="tritonpipeline-webhook-"))  # mode 0700
        live = LiveCertificate(workdir)
        follow: asyncio.Task[None]
        try:
            if ws.cert_dir:
                live.load(*_read_pair(Path(ws.cert_dir)))
                follow = asyncio.create_task(self.follow_dir(Path(ws.cert_dir), live))
            else:
                certs = await self.current()
                self.ca_bundle = certs.ca_bundle
                live.load(certs.cert, certs.key)
                follow = asyncio.create_task(self.follow(live, certs))
            # kopf loads the first certificate into our context from a copy that never changes: its own
            # file check would close the listener and open another on a change (connections refused in
            # between); `live` swaps the certificate in place instead
            first = shutil.copy(live.bundle, workdir / "first.pem")
            server = ReviewServer(
                addr=ws.listen_host or None,
                port=ws.port,
                context=live.context,
                certfile=first,
                pkeyfile=first,
                cadata=b"",  # the configuration's caBundle is ours (`register`); kopf's is unused
                file_check_interval=KOPF_FILE_CHECK_SECONDS,
            )
            try:
                async with server:
                    async for config in server(fn):
                        await self.register()
                        yield config
            finally:
                follow.cancel()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    async def current(self) -> Certs:
        """The self-signed certificate to serve: the stored one, or a new one written to the store when
        there is none or it is due (`due`), without the CAs that expired. Any error is logged and retried
        with backoff."""

        def failed(exc: Exception, _: int, delay: float) -> None:
            events.WEBHOOK_CERT_STORE_FAILED.log(log, store=self.store, error=describe(exc), retry=delay)

        return await retrying(
            lambda: asyncio.to_thread(self._current),
            failed,
            first=FIRST_RETRY_SECONDS,
            cap=REGISTER_RETRY_SECONDS,
        )

    def _current(self) -> Certs:
        names = self.ws.server_names()
        while True:
            now = datetime.datetime.now(datetime.timezone.utc)
            stored, version = self.store.read()
            why = "there is none" if stored is None else due(stored, names, now)
            if stored is not None and not why:
                kept = pruned(stored, now)
                if kept == stored or self.store.write(kept, version):
                    return kept
                continue  # another replica wrote first: read what it wrote
            certs = new_certs(stored, names, self.ws.cert_seconds, now)
            if self.store.write(certs, version):
                events.WEBHOOK_CERT_ISSUED.log(log, store=self.store, why=why)
                return certs

    async def follow(self, live: LiveCertificate, serving: Certs) -> None:
        """Serve what the store holds: renew when due, switch when another replica renewed. The API
        server trusts a new CA before this server presents the certificate it signed. A supervised loop
        (loops.py): a check that fails is logged and tried again."""

        async def check() -> None:
            nonlocal serving
            certs = await asyncio.to_thread(self._current)
            if certs.ca_bundle != self.ca_bundle:
                self.ca_bundle = certs.ca_bundle
                await self.register()
            if certs.cert != serving.cert:
                live.load(certs.cert, certs.key)
                serving = certs
                events.WEBHOOK_CERT_RELOADED.log(log)

        loop = self.loops.add(WEBHOOK_CERTIFICATE, min(STORE_CHECK_SECONDS, self.ws.cert_seconds / 6))
        await supervise(self.loops, loop, check, log, wait_first=True)

    async def follow_dir(self, cert_dir: Path, live: LiveCertificate) -> None:
        """Serve the files of WEBHOOK_CERT_DIR as they are renewed (cert-manager's Secret, mounted):
        a pair that does not load (caught between its two files' updates) is tried again next time. A
        supervised loop (loops.py), as `follow`."""
        serving = _read_pair(cert_dir)

        async def check() -> None:
            nonlocal serving
            try:
                pair = _read_pair(cert_dir)
            except OSError as exc:
                events.WEBHOOK_CERT_UNUSABLE.log(log, where=cert_dir, error=exc)
                return
            if pair == serving:
                return
            try:
                live.load(*pair)
            except ssl.SSLError as exc:
                events.WEBHOOK_CERT_UNUSABLE.log(log, where=cert_dir, error=exc)
                return
            serving = pair
            events.WEBHOOK_CERT_RELOADED.log(log)

        loop = self.loops.add(WEBHOOK_CERTIFICATE, FILE_CHECK_SECONDS)
        await supervise(self.loops, loop, check, log, wait_first=True)

    async def register(self) -> None:
        """Apply the configuration with the CAs of now; on any failure log why and retry with backoff
        (the operator keeps reconciling). One at a time (kopf's restart and `follow` may both register):
        the last applied is the latest bundle."""

        async def apply() -> dict[str, Any]:
            args = (self.ws, self.namespaces, self.ca_bundle, self.own_namespace)
            if self.review:  # first: no pipeline is let through unrecorded while both are registered
                await asyncio.to_thread(self.kube.apply, mutating_configuration(*args))
            doc = configuration(*args)
            await asyncio.to_thread(self.kube.apply, doc)
            return doc

        def failed(exc: Exception, _: int, delay: float) -> None:
            events.WEBHOOK_REGISTER_FAILED.log(
                log, configuration=self.ws.configuration, error=describe(exc), retry=delay
            )

        async with self.registering:
            doc = await retrying(apply, failed, first=FIRST_RETRY_SECONDS, cap=REGISTER_RETRY_SECONDS)
        self.registered()
        served = doc["webhooks"][0]["clientConfig"]
        where = f"Service {self.ws.service}" if self.ws.service else served["url"]
        events.WEBHOOK_REGISTERED.log(
            log,
            webhook=WEBHOOK_NAME,
            configuration=self.ws.configuration,
            failure_policy=self.ws.failure_policy,
            where=where,
        )


def server(
    settings: Settings, kube: Kube, loops: Loops, registered: Callable[[], None] = lambda: None
) -> Server | kopf.WebhookServerProtocol:
    """kopf's admission server for these settings: ours, or one that serves nothing when the webhook is off
    (kopf wants a server once a validating handler exists). Raises WebhookConfigError."""
    ws = WebhookSettings.from_env()
    if not ws.enabled:
        return disabled
    namespaces, own = settings.namespaces, settings.operator_namespace
    return Server(ws, namespaces, kube, loops, own, settings.review_authors, registered)


class LiveCertificate:
    """The TLS context the webhook listens with; `load` replaces its certificate in place. A handshake
    takes the context's certificate when it starts, so new connections get the new certificate, those
    open keep theirs, and the listener never closes."""

    def __init__(self, workdir: Path) -> None:
        self.context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        self.bundle = workdir / "tls.pem"

    def load(self, cert: bytes, key: bytes) -> None:
        """Serve `cert` with `key` from the next handshake on. Raises ssl.SSLError, serving what it did,
        when they do not load (a key of another certificate, a half-written file)."""
        bundle = _write_bundle(self.bundle.parent, cert, key)
        ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH).load_cert_chain(bundle)  # raises first
        self.context.load_cert_chain(bundle)


def _read_pair(cert_dir: Path) -> tuple[bytes, bytes]:
    """tls.crt and tls.key of a certificate directory (checked to exist at start-up)."""
    return (cert_dir / "tls.crt").read_bytes(), (cert_dir / "tls.key").read_bytes()


def _write_bundle(workdir: Path, cert: bytes, key: bytes) -> Path:
    """Certificate and key in one file (0600), replaced in one step: a reader never sees a new
    certificate with the old key."""
    path, new = workdir / "tls.pem", workdir / "tls.pem.new"
    new.unlink(missing_ok=True)
    with os.fdopen(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(cert + key)
    new.replace(path)
    return path


async def disabled(fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
    """The webhook server when the webhook is off: serves nothing (kopf needs one for its handler)."""
    await asyncio.Event().wait()
    yield kopf.WebhookClientConfig()  # never reached
