"""The admission webhook's server: kopf's webhook server with this operator's certificate
(runtime/webhook_certificates.py), which registers the webhook configurations
(render/webhook_configuration.py) once it listens; or, with the webhook off, a server of nothing.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp.web
import kopf

from ..kube.api_client import Kube
from ..render.webhook_configuration import (
    WEBHOOK_NAME,
    WebhookSettings,
    configuration,
    mutating_configuration,
)
from ..settings import Settings
from . import log_events as events
from .loops import FIRST_RETRY_SECONDS, Loops, describe, retrying
from .webhook_certificates import RETRY_SECONDS, Certificates, LiveCertificate

log = logging.getLogger(__name__)

NOT_REGISTERED = "the admission webhook is not registered yet"  # why the operator is not ready before
KOPF_FILE_CHECK_SECONDS = 3600.0  # kopf's check of its (unchanging) copy: rare, it finds nothing

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
        self.registering = asyncio.Lock()
        self.certificates = Certificates(ws, kube, loops, self.register)

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        ws = self.ws
        workdir = Path(tempfile.mkdtemp(prefix="tritonpipeline-webhook-"))  # mode 0700
        live = LiveCertificate(workdir)
        follow: asyncio.Task[None]
        try:
            follow = await self.certificates.serve(live)
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

    async def register(self) -> None:
        """Apply the configuration with the CAs of now; on any failure log why and retry with backoff
        (the operator keeps reconciling). One at a time (kopf's restart and the certificate's loop may both
        register):
        the last applied is the latest bundle."""

        async def apply() -> dict[str, Any]:
            args = (self.ws, self.namespaces, self.certificates.ca_bundle, self.own_namespace)
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
            doc = await retrying(apply, failed, first=FIRST_RETRY_SECONDS, cap=RETRY_SECONDS)
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
    (kopf wants a server once a validating handler exists). Raises WebhookConfigError
    (render/webhook_configuration.py)."""
    ws = WebhookSettings.from_env()
    if not ws.enabled:
        return disabled
    namespaces, own = settings.namespaces, settings.operator_namespace
    return Server(ws, namespaces, kube, loops, own, settings.review_authors, registered)


async def disabled(fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
    """The webhook server when the webhook is off: serves nothing (kopf needs one for its handler)."""
    await asyncio.Event().wait()
    yield kopf.WebhookClientConfig()  # never reached
