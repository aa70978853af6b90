"""The webhook's certificates: the self-signed CA and serving certificate (`self_signed`), their
rotation (`due`, `pruned`, `new_certs`), where they are kept (`MemoryStore`, or the `SecretStore` the
replicas share), the TLS context that serves them (`LiveCertificate`) and the loops that follow a renewal
(`Certificates`: the store's, or the files of WEBHOOK_CERT_DIR such as cert-manager's).

Replicas of the operator share the self-signed certificate through a Secret: each serves it, and the
configuration trusts every CA in it that has not expired, so no replica's registration undoes another's.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..kube.api_client import Kube, KubeError, path
from ..render.webhook_configuration import CERT_SECONDS, FILE_CHECK_SECONDS, WebhookSettings
from . import log_events as events
from .loops import FIRST_RETRY_SECONDS, WEBHOOK_CERTIFICATE, Loops, describe, retrying, supervise

log = logging.getLogger(__name__)

RENEW_AT = 2 / 3  # a new CA and certificate replace them after this part of their validity
STORE_CHECK_SECONDS = 30.0  # how often a replica reads the shared certificate (at most a sixth of its life)
BACKDATE = datetime.timedelta(minutes=5)  # certificates start this early (clocks that run behind)
RETRY_SECONDS = 10.0  # the longest wait before the first certificate or the registration is retried


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


class Certificates:
    """The certificate the webhook serves and the CAs the API server is told to trust: the self-signed
    one of the store (renewed when due, switched to when another replica renewed it), or the files of
    WEBHOOK_CERT_DIR as they are renewed. `trusted` is called once the CAs to trust changed: it registers
    the configuration again, before the certificate a new CA signed is served."""

    def __init__(
        self, ws: WebhookSettings, kube: Kube, loops: Loops, trusted: Callable[[], Awaitable[None]]
    ) -> None:
        self.ws = ws
        self.loops = loops  # the certificate's check is one of the operator's loops (loops.py)
        self.trusted = trusted
        self.ca_bundle: bytes | None = None  # the self-signed CAs the API server is told to trust
        self.store: MemoryStore | SecretStore = MemoryStore()
        if ws.shared_cert:
            namespace, name = ws.shared_cert.split("/", 1)
            self.store = SecretStore(kube, namespace, name)

    async def serve(self, live: LiveCertificate) -> asyncio.Task[None]:
        """Load the first certificate into `live` and start the loop that follows its renewals."""
        if self.ws.cert_dir:
            cert_dir = Path(self.ws.cert_dir)
            live.load(*_read_pair(cert_dir))
            return asyncio.create_task(self.follow_dir(cert_dir, live))
        certs = await self.current()
        self.ca_bundle = certs.ca_bundle
        live.load(certs.cert, certs.key)
        return asyncio.create_task(self.follow(live, certs))

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
            cap=RETRY_SECONDS,
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
                await self.trusted()
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
